#!/usr/bin/env python3
"""Ours against Hugging Face transformers on this CPU, alternating run by run.

    .venv-torch/bin/python benches/cpu_compare.py                      # 3 rounds, all workloads
    .venv-torch/bin/python benches/cpu_compare.py --rounds 5 --workloads tiny-train
    .venv-torch/bin/python benches/cpu_compare.py --peer-bin /tmp/pipeline-old --workloads tiny-train
        # two builds of ours against each other (a regression check), transformers left out

The machine's speed drifts (2x within an hour on a shared host), so absolute figures from
different moments do not compare. Each round runs every arm once per workload, one after the
other (ours then transformers, then transformers then ours in the next round, ...), and the
figure that counts is the median
over rounds of the per-round ratio ours / theirs. Each round also measures the machine's sgemm
rate (the better of torch.mm and numpy, 2048^3, 1 and 2 threads) so that model FLOP/s can be
read as a fraction of what the cores can do at that moment.

Workloads (the issue's shapes):
  tiny-train  albert_zh tiny, AlbertForPreTraining step, batch 32 x seq 128, 20 masked
  base-train  albert_zh base, the same at batch 8
  tiny-infer  AlbertModel forward, tiny, batch 64 x seq 64 (ours: one chunk per core, as
              `pipeline predict` runs)

Instruction set: `--isa avx2` measures an AVX2-only host on an AVX-512 one. It sets both sides'
own switches (PIPELINE_CPU_LEVEL=avx2 for our kernels, ATEN_CPU_CAPABILITY=avx2 and
MKL_ENABLE_INSTRUCTIONS=AVX2 for torch's, GLIBC_TUNABLES for glibc's memcpy and memset) and
preloads benches/hide_avx512.c (built into
target/hide_avx512.so), which hides AVX-512 from CPUID for every library that asks, gemm (burn's
matrix products) included, which has no switch of its own. The sgemm rate is then measured at
AVX2 too. `--isa native` (the default) leaves everything as the host has it. Every line written
records `isa`.

Ours: `pipeline bench train|infer --json`; transformers: benches/hf_baseline.py (2 threads,
AdamW, sdpa attention, fp32). Both report CPU-seconds per wall-second over their timed runs.
Every raw run and one summary line per workload and arm are appended to --out (JSON lines) with
the date, the commit and the host.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKLOADS = {
    "tiny-train": {
        "ours": ["bench", "train", "--model", "tiny", "--batch", "32", "--seq", "128",
                 "--masked", "20", "--steps", "5", "--runs", "3", "--warmup", "2"],
        "hf": ["train", "--config", "tiny", "--batch", "32", "--seq", "128", "--masked", "20",
               "--steps", "5", "--runs", "3", "--warmup", "2"],
        "rate": ("tokens_per_s", "tokens_per_s"),
        "shape": {"what": "training", "model": "tiny", "batch": 32, "seq": 128},
    },
    "base-train": {
        "ours": ["bench", "train", "--model", "base", "--batch", "8", "--seq", "128",
                 "--masked", "20", "--steps", "2", "--runs", "3", "--warmup", "1"],
        "hf": ["train", "--config", "base", "--batch", "8", "--seq", "128", "--masked", "20",
               "--steps", "2", "--runs", "3", "--warmup", "1"],
        "rate": ("tokens_per_s", "tokens_per_s"),
        "shape": {"what": "training", "model": "base", "batch": 8, "seq": 128},
    },
    "tiny-infer": {
        "ours": ["bench", "infer", "--model", "tiny", "--batch", "64", "--seq", "64",
                 "--steps", "3", "--runs", "5", "--warmup", "2", "--split"],
        "hf": ["infer", "--config", "tiny", "--batch", "64", "--seq", "64", "--steps", "3",
               "--runs", "5", "--warmup", "2"],
        "rate": ("sentences_per_s", "sentences_per_s"),
        "shape": {"what": "inference", "model": "tiny", "batch": 64, "seq": 64},
    },
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def json_line(text):
    for line in text.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line in:\n{text[-2000:]}")


def run(cmd, env=None):
    log("+ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json_line(p.stdout)


def sgemm(python, threads, extra_env):
    """GFLOP/s of a 2048^3 fp32 matrix product at `threads` threads (best of 5 after warm-up),
    the better of torch.mm and numpy: torch's MKL takes a slower path on AMD CPUs, so torch.mm
    alone understates what the cores can do (numpy's OpenBLAS does not)."""
    code = f"""
import time, numpy as np, torch
torch.set_num_threads({threads})
def rate(mm, a, b):
    for _ in range(3): mm(a, b)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter(); mm(a, b); dt = time.perf_counter() - t
        best = max(best, 2 * 2048**3 / dt / 1e9)
    return best
a = torch.randn(2048, 2048); b = torch.randn(2048, 2048)
print(rate(torch.mm, a, b), rate(np.matmul, a.numpy(), b.numpy()))
"""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               **extra_env)
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, env=env)
    torch_rate, numpy_rate = (float(x) for x in out.stdout.split())
    return max(torch_rate, numpy_rate)


def isa_env(isa):
    """The environment variables that make every arm (and the sgemm probe) run at `isa`."""
    if isa == "native":
        return {}
    if isa != "avx2":
        sys.exit(f"--isa {isa!r}: expected native or avx2")
    shim = os.path.join(ROOT, "target", "hide_avx512.so")
    src = os.path.join(HERE, "hide_avx512.c")
    if not os.path.exists(shim) or os.path.getmtime(shim) < os.path.getmtime(src):
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", shim, src], check=True)
    return {"PIPELINE_CPU_LEVEL": "avx2", "ATEN_CPU_CAPABILITY": "avx2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2", "LD_PRELOAD": shim, "HIDE_AVX512_QUIET": "1",
            # glibc picks its string functions (memcpy, memset) in the dynamic loader, before
            # the shim is loaded: its own tunable turns AVX-512 off there.
            "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD"}


def host_isa():
    """The widest of our levels this host has (avx512, avx2 or baseline), from /proc/cpuinfo."""
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    if "avx2" in flags and "fma" in flags:
        return "avx512" if "avx512f" in flags else "avx2"
    return "baseline"


def git_commit():
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=ROOT, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=ROOT).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except Exception:
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/pipeline"))
    ap.add_argument("--device", default="cpu", help="ours: flex (cpu) or tch-cpu")
    ap.add_argument("--peer-bin", help="compare against this build of ours instead of transformers")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/bench/cpu.jsonl"))
    ap.add_argument("--note", default="")
    ap.add_argument("--isa", default="native",
                    help="native, or avx2: every arm as on an AVX2-only host (see above)")
    a = ap.parse_args()
    if a.rounds < 1:
        sys.exit("--rounds must be at least 1")
    workloads = [w for w in a.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            sys.exit(f"unknown workload {w!r}: expected one of {', '.join(WORKLOADS)}")
    for path in [a.bin] + ([a.peer_bin] if a.peer_bin else []):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} is not an executable: build it first (cargo build --release)")

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads": a.threads,
        "note": a.note,
        # What every arm ran with: the host's best, or avx2 when --isa avx2 hid AVX-512.
        "isa": host_isa() if a.isa == "native" else a.isa,
        "isa_emulated": a.isa != "native",
        "load_avg_1min": os.getloadavg()[0],
    }
    peer = "peer" if a.peer_bin else "transformers"
    extra_env = isa_env(a.isa)
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads), **extra_env)
    results = {w: {"ours": [], peer: []} for w in workloads}
    sgemms = []
    out = open(a.out, "a")

    def record(obj):
        out.write(json.dumps(obj, sort_keys=True) + "\n")
        out.flush()

    for r in range(a.rounds):
        s1, s2 = sgemm(a.python, 1, extra_env), sgemm(a.python, a.threads, extra_env)
        sgemms.append((s1, s2))
        meta["load_avg_1min"] = os.getloadavg()[0]
        log(f"round {r + 1}/{a.rounds} (load {meta['load_avg_1min']:.2f}): sgemm {s1:.0f} GFLOP/s (1 thread), {s2:.0f} ({a.threads})")
        record({"bench": "sgemm", "round": r + 1, "gflops_1": s1, f"gflops_{a.threads}": s2, **meta})
        for w in workloads:
            spec = WORKLOADS[w]
            run_ours = lambda: run([a.bin] + spec["ours"] + ["--device", a.device, "--json", "-q"], env)
            if a.peer_bin:
                run_theirs = lambda: run([a.peer_bin] + spec["ours"]
                                         + ["--device", a.device, "--json", "-q"], env)
            else:
                run_theirs = lambda: run([a.python, os.path.join(HERE, "hf_baseline.py")] + spec["hf"]
                                         + ["--threads", str(a.threads), "--device", "cpu"], env)
            # Every other round the peer goes first (ABBA), so that whatever favours the first
            # or the second run of a pair (the sgemm probe just before, a neighbour's build
            # starting) does not always favour the same arm.
            if r % 2 == 0:
                ours, theirs = run_ours(), run_theirs()
            else:
                theirs = run_theirs()
                ours = run_ours()
            first = "ours" if r % 2 == 0 else peer
            for arm, res in (("ours", ours), (peer, theirs)):
                results[w][arm].append(res)
                record({"round": r + 1, "workload": w, "arm": arm, "first": first, **res, **meta})
            k_ours, k_theirs = spec["rate"]
            log(f"  {w}: ours {ours[k_ours]:.0f}, {peer} {theirs[k_theirs]:.0f} "
                f"→ {ours[k_ours] / theirs[k_theirs]:.2f}×")

    sg1 = statistics.median(s for s, _ in sgemms)
    sg2 = statistics.median(s for _, s in sgemms)
    log(f"\nsgemm (2048³, best of torch/numpy, median of rounds): {sg1:.0f} GFLOP/s on 1 thread, {sg2:.0f} on {a.threads}")
    log(f"{'workload':<12} {'ours':>8} {peer:>13} {'ratio (median of rounds)':>26} {'ours CPU-s/s':>13} {peer + ' CPU-s/s':>16} {'ours % sgemm':>13}")
    for w in workloads:
        spec = WORKLOADS[w]
        k_ours, k_theirs = spec["rate"]
        o = [x[k_ours] for x in results[w]["ours"]]
        t = [x[k_theirs] for x in results[w][peer]]
        ratios = [x / y for x, y in zip(o, t)]
        # The same ratio per CPU-second each arm used: on a shared host, where the neighbours
        # take a varying share of the cores, it moves less than the wall-clock ratio (torch's
        # OpenMP threads spin while they wait, which counts against it here).
        def per_cpu(res, key):
            busy = res.get("cpu_seconds_per_wall_second") or float("nan")
            return res[key] / busy
        cpu_ratios = [per_cpu(x, k_ours) / per_cpu(y, k_theirs)
                      for x, y in zip(results[w]["ours"], results[w][peer])]
        busy_o = statistics.median(x.get("cpu_seconds_per_wall_second", float("nan")) for x in results[w]["ours"])
        busy_t = statistics.median(x.get("cpu_seconds_per_wall_second", float("nan")) for x in results[w][peer])
        tflops = statistics.median(x.get("model_tflops_per_s", float("nan")) for x in results[w]["ours"])
        frac = tflops * 1e3 / sg2
        summary = {
            "bench": "cpu_compare", "workload": w, **spec["shape"], "peer": peer, "rate": k_ours,
            # The peer's rate under its arm's name ("transformers"), "peer_rate" for another
            # build of ours ("peer" is the field that names the arm).
            "ours": statistics.median(o), ("peer_rate" if peer == "peer" else peer): statistics.median(t),
            "ratio_median": statistics.median(ratios), "ratios": ratios, "rounds": a.rounds,
            "ratio_per_cpu_second_median": statistics.median(cpu_ratios),
            "ratios_per_cpu_second": cpu_ratios,
            "ours_cpu_seconds_per_wall_second": busy_o,
            f"{peer}_cpu_seconds_per_wall_second": busy_t,
            "ours_model_gflops": tflops * 1e3, "sgemm_gflops": sg2, "sgemm_gflops_1_thread": sg1,
            "ours_fraction_of_sgemm": frac, "device": a.device, **meta,
        }
        record(summary)
        log(f"{w:<12} {statistics.median(o):>8.0f} {statistics.median(t):>13.0f} "
            f"{statistics.median(ratios):>20.2f}× ({', '.join(f'{x:.2f}' for x in ratios)}) "
            f"{busy_o:>8.2f} {busy_t:>16.2f} {100 * frac:>12.0f}%  "
            f"per CPU-second {statistics.median(cpu_ratios):.2f}×")
    log(f"\n{meta['date']}, commit {meta['commit']}, {meta['host']}; appended to {a.out}")


if __name__ == "__main__":
    main()
