#!/usr/bin/env python3
"""Helpers of benches/serve.sh (standard library only; any python3 runs it):

    serve_load.py bodies --kind single|pair --data DIR --out FILE [--n 512]
    serve_load.py check --bodies FILE URL_A URL_B [--n 32] [--tolerance 1e-3]
    serve_load.py rate URL --bodies FILE --rate R --duration S [--connections 64]
    serve_load.py summary RESULTS.jsonl

bodies: the request bodies, one JSON object a line, from real Chinese text in the shared data:
single texts are ChnSentiCorp test reviews of at least 64 characters cut to their first 64;
pairs are AFQMC train question pairs both of whose sides have at least 32 characters, each cut to
its first 32 (the short question-matching sets have few such pairs; AFQMC train has 130).

check: POSTs the same bodies to two servers and fails unless both answer 200 with the same label
set and probabilities within the tolerance: the two servers serve the same model.

rate: an open-loop load at a fixed rate (what wrk2 and `oha -q` do, neither of which Debian
packages): request i is due at start + i / R whatever happened before, and its latency runs from
that due time to the end of its response, so a server that falls behind is charged for the
queue it causes (no coordinated omission). Requests go over `--connections` keep-alive
HTTP/1.1 connections; a due request waits for a free one. Prints one JSON object.

summary: the markdown tables of a results file written by serve.sh (one JSON object a line), with
the median over rounds of each per-round ratio ours / Python.
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import Request, urlopen


def read_tsv(path: Path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\n").split("\t")


def bodies(a) -> None:
    data = Path(a.data)
    out = []
    if a.kind == "single":
        for row in read_tsv(data / "chnsenticorp" / "test.tsv"):
            text = row[-1].strip()
            if len(row) == 2 and len(text) >= 64:
                out.append({"text": text[:64]})
    else:
        for row in read_tsv(data / "afqmc" / "train.tsv"):
            if len(row) >= 2:
                a_text, b_text = row[0].strip(), row[1].strip()
                if len(a_text) >= 32 and len(b_text) >= 32:
                    out.append({"text_a": a_text[:32], "text_b": b_text[:32]})
    out = out[: a.n]
    if not out:
        sys.exit(f"bodies: no {a.kind} texts long enough under {data}")
    with open(a.out, "w", encoding="utf-8") as f:
        for body in out:
            f.write(json.dumps(body, ensure_ascii=False) + "\n")
    print(f"bodies: {len(out)} {a.kind} bodies -> {a.out}", file=sys.stderr)


def post(url: str, body: str):
    req = Request(
        url.rstrip("/") + "/predict",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    with urlopen(req, timeout=30) as r:
        return r.status, json.loads(r.read())


def check(a) -> None:
    lines = Path(a.bodies).read_text(encoding="utf-8").splitlines()[: a.n]
    worst = 0.0
    for line in lines:
        (sa, ra), (sb, rb) = post(a.url_a, line), post(a.url_b, line)
        if sa != 200 or sb != 200:
            sys.exit(f"check: status {sa} / {sb} for {line}")
        pa, pb = ra["probabilities"], rb["probabilities"]
        if set(pa) != set(pb):
            sys.exit(f"check: labels differ: {sorted(pa)} / {sorted(pb)}")
        worst = max(worst, max(abs(pa[k] - pb[k]) for k in pa))
    verdict = "same model" if worst <= a.tolerance else "DIFFERENT outputs"
    print(
        f"check: {len(lines)} bodies, max |p_a - p_b| = {worst:.2e}: {verdict}",
        file=sys.stderr,
    )
    if worst > a.tolerance:
        sys.exit(1)


async def read_response(reader) -> int:
    """Reads one HTTP/1.1 response (Content-Length or chunked); returns its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def open_loop(a, requests):
    url = urlsplit(a.url)
    total = int(a.rate * a.duration)
    due: asyncio.Queue = asyncio.Queue()
    latencies, errors = [], 0

    async def connection():
        nonlocal errors
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        while True:
            item = await due.get()
            if item is None:
                break
            i, t_due = item
            writer.write(requests[i % len(requests)])
            try:
                status = await read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                errors += 1
                reader, writer = await asyncio.open_connection(url.hostname, url.port)
                continue
            if status == 200:
                latencies.append(time.perf_counter() - t_due)
            else:
                errors += 1
        writer.close()

    workers = [asyncio.create_task(connection()) for _ in range(a.connections)]
    start = time.perf_counter()
    for i in range(total):
        t_due = start + i / a.rate
        delay = t_due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        due.put_nowait((i, t_due))
    for _ in workers:
        due.put_nowait(None)
    await asyncio.gather(*workers)
    return latencies, errors, time.perf_counter() - start


def percentile(sorted_values, q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return sorted_values[k]


def rate(a) -> None:
    url = urlsplit(a.url)
    host = f"{url.hostname}:{url.port}"
    requests = []
    for line in Path(a.bodies).read_text(encoding="utf-8").splitlines():
        body = line.encode()
        requests.append(
            f"POST /predict HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body
        )
    latencies, errors, wall = asyncio.run(open_loop(a, requests))
    lat = sorted(latencies)
    print(
        json.dumps(
            {
                "rate": a.rate,
                "duration_s": round(wall, 3),
                "ok": len(lat),
                "errors": errors,
                "achieved_rps": round(len(lat) / wall, 1),
                "p50_ms": round(percentile(lat, 0.50) * 1e3, 3),
                "p99_ms": round(percentile(lat, 0.99) * 1e3, 3),
                "max_ms": round(lat[-1] * 1e3, 3) if lat else None,
            }
        )
    )


def fmt(x, digits=1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def median_of(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def print_runs(meta, runs) -> None:
    print(
        f"| workload | server | round | req/s at c={meta.get('concurrency', '?')} | p50 ms "
        "| p99 ms | server CPU-s per wall-s | open-loop rate req/s | p50 ms at rate "
        "| p99 ms at rate | peak RSS MB |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r['workload']} | {r['server']} | {r['round']} | {fmt(r['rps'])} "
            f"| {fmt(r['p50_ms'], 2)} | {fmt(r['p99_ms'], 2)} | {fmt(r.get('cpu_s_per_wall_s'), 2)} "
            f"| {fmt(r.get('rate'), 1)} "
            f"| {fmt(r.get('rate_p50_ms'), 2)} | {fmt(r.get('rate_p99_ms'), 2)} "
            f"| {fmt(r.get('rss_mb'), 0)} |"
        )


def print_ratios(runs) -> None:
    """Per workload: the medians over rounds of the per-round ratios, and the targets."""
    print(
        "\n| workload | rounds | req/s ours / Python (median of rounds) | p99 ours / Python "
        "| p99 ms at half of max, ours | p99 ms at half of max, Python | targets |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for workload in sorted({r["workload"] for r in runs}):
        by_round = {}
        for r in runs:
            if r["workload"] == workload:
                by_round.setdefault(r["round"], {})[r["server"]] = r
        rounds = [v for v in by_round.values() if "serve" in v and "python" in v]
        if not rounds:
            continue
        rps = median_of(x["serve"]["rps"] / x["python"]["rps"] for x in rounds)
        p99 = median_of(x["serve"]["p99_ms"] / x["python"]["p99_ms"] for x in rounds)
        ours = median_of(x["serve"].get("rate_p99_ms") for x in rounds)
        theirs = median_of(x["python"].get("rate_p99_ms") for x in rounds)
        met = [
            f"≥ 3× req/s: {'met' if rps >= 3 else 'missed'}",
            f"p99 ≤ Python's: {'met' if p99 <= 1 else 'missed'}",
            f"p99 ≤ 50 ms at half of max: {'met' if ours is not None and ours <= 50 else 'missed'}",
        ]
        print(
            f"| {workload} | {len(rounds)} | {rps:.2f}× | {p99:.2f} | {fmt(ours, 2)} "
            f"| {fmt(theirs, 2)} | {'; '.join(met)} |"
        )


def summary(a) -> None:
    rows = [json.loads(line) for line in open(a.results, encoding="utf-8") if line.startswith("{")]
    meta = next((r for r in rows if r.get("type") == "meta"), {})
    runs = [r for r in rows if r.get("type") == "run"]
    print(
        f"{meta.get('date', '?')}, commit {meta.get('commit', '?')} (binary built "
        f"{meta.get('binary_built', '?')}), {meta.get('machine', '?')}; {meta.get('python', '?')}; "
        f"{meta.get('wrk', '?')}, {meta.get('duration_s', '?')} s per measurement; serve flags: "
        f"{meta.get('serve_args') or 'defaults'}; load average at the start "
        f"{' '.join(meta.get('load_average', ['?']))}; autogroup nice "
        f"{meta.get('autogroup_nice') or 'unchanged'}.\n"
    )
    print_runs(meta, runs)
    print_ratios(runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bodies")
    b.add_argument("--kind", choices=["single", "pair"], required=True)
    b.add_argument("--data", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--n", type=int, default=512)
    c = sub.add_parser("check")
    c.add_argument("url_a")
    c.add_argument("url_b")
    c.add_argument("--bodies", required=True)
    c.add_argument("--n", type=int, default=32)
    c.add_argument("--tolerance", type=float, default=1e-3)
    r = sub.add_parser("rate")
    r.add_argument("url")
    r.add_argument("--bodies", required=True)
    r.add_argument("--rate", type=float, required=True)
    r.add_argument("--duration", type=float, default=10.0)
    r.add_argument("--connections", type=int, default=64)
    s = sub.add_parser("summary")
    s.add_argument("results")
    a = p.parse_args()
    {"bodies": bodies, "check": check, "rate": rate, "summary": summary}[a.cmd](a)


if __name__ == "__main__":
    main()
