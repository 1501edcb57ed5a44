#!/usr/bin/env python3
"""Where the host's time went, range by range, in a trace of `pipeline bench train --trace`.

    python3 benches/trace_summary.py TRACE.json[.gz] [--top N]

The trace is torch's profiler's (Chrome's JSON format): the ranges `pipeline::forward`,
`pipeline::forward_backward` and `pipeline::step` (two), each libtorch operator's span on the
thread that called it and, on CUDA, each kernel with the runtime call that launched it. For
each range it prints, on the range's thread:

- its host time, the part spent inside top-level torch operators (an operator called inside
  another counts in its caller's span) and the rest, between operators: burn's autodiff, our
  own code and the FFI, which no operator count or kernel profile shows;
- on CUDA, the kernels (and copies) the range launched: how many, how long the device was busy
  with them (their spans' union), and how long after the range's end the last one finished. A range
  whose host time is far above its device's busy time is host-bound;
- its top-level operators with the most host time.

Why this and not Nsight Systems: nsys is not on the lent GPU machine, and torch's profiler is
in the libtorch the binary loads (crates/albert/src/torch_trace.rs).
"""

import argparse
import collections
import gzip
import json
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: cannot read a JSON trace: {e}")
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        sys.exit(f"{path}: no traceEvents: not a Chrome trace of torch's profiler")
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def top_level(ops):
    """The operators of one thread not inside another one's span, in time order."""
    out, open_until = [], -1.0
    for op in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        if op["ts"] >= open_until:
            out.append(op)
            open_until = op["ts"] + op["dur"]
    return out


def union_length(spans):
    total, end = 0.0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def within(e, start, stop):
    return e["ts"] >= start and e["ts"] < stop


def summarise(events, top):
    ranges = sorted((e for e in events if e.get("cat") == "user_annotation"
                     and e["name"].startswith("pipeline::")), key=lambda e: e["ts"])
    if not ranges:
        sys.exit("no pipeline:: ranges in the trace (made by `pipeline bench train --trace`?)")
    ops_by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            ops_by_thread[e["tid"]].append(e)
    tops = {tid: top_level(ops) for tid, ops in ops_by_thread.items()}
    # The device's work: kernels and the copies and fills the runtime queues (a batch's
    # upload from pinned memory is a `gpu_memcpy`).
    kernels = {e["args"].get("correlation"): e for e in events
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "args" in e}
    # cuBLAS and cuDNN launch some kernels through the driver API (`cuda_driver` spans).
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    counts = collections.Counter(e.get("cat") for e in events)
    print(f"{sum(counts.values())} spans: "
          + ", ".join(f"{c} {n}" for c, n in counts.most_common()))
    for r in ranges:
        start, stop = r["ts"], r["ts"] + r["dur"]
        mine = [op for op in tops.get(r["tid"], []) if within(op, start, stop)]
        in_ops = sum(op["dur"] for op in mine)
        others = sum(op["dur"] for tid, ops in tops.items() if tid != r["tid"]
                     for op in ops if within(op, start, stop))
        print(f"\n{r['name']}: host {r['dur'] / 1e3:.3f} ms; in {len(mine)} top-level torch "
              f"operators {in_ops / 1e3:.3f} ms, between them {(r['dur'] - in_ops) / 1e3:.3f} ms "
              f"({(r['dur'] - in_ops) / max(r['dur'], 1e-9):.0%})"
              + (f"; other threads' operators {others / 1e3:.3f} ms" if others else ""))
        mine_launches = [e for e in launches if within(e, start, stop)]
        if mine_launches:
            ran = [kernels[c] for c in (e["args"].get("correlation") for e in mine_launches
                                         if "args" in e) if c in kernels]
            busy = union_length((k["ts"], k["ts"] + k["dur"]) for k in ran)
            last = max((k["ts"] + k["dur"] for k in ran), default=stop)
            runtime = sum(e["dur"] for e in mine_launches)
            print(f"  CUDA: {len(mine_launches)} runtime and driver calls ({runtime / 1e3:.3f} "
                  f"ms of the host), {len(ran)} kernels and copies, the device busy "
                  f"{busy / 1e3:.3f} ms with them, "
                  f"the last ending {(last - stop) / 1e3:.3f} ms after the range")
        by_name = collections.defaultdict(lambda: [0, 0.0])
        for op in mine:
            by_name[op["name"]][0] += 1
            by_name[op["name"]][1] += op["dur"]
        for name, (n, dur) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"  {dur / 1e3:9.3f} ms {n:6d}  {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace",
                        help="a trace of `pipeline bench train --trace` (.json or .json.gz)")
    parser.add_argument("--top", type=int, default=12, help="operators shown per range (12)")
    args = parser.parse_args()
    summarise(load(args.trace), args.top)


if __name__ == "__main__":
    main()
