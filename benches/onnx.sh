#!/usr/bin/env bash
# The exported ONNX model on one core: single-sequence latency (median of RUNS, default 200)
# and peak memory (the process's ru_maxrss) at length 128, for an albert_tiny_zh-sized
# classifier with random weights (timing does not depend on the values), fp32 as exported and
# int8 after onnxruntime's dynamic quantisation. One JSON line per measurement on stdout (and
# appended to OUT when given, after a line with the date and commit); results/bench/onnx.md
# says what they measured.
#
# Needs the pipeline binary (BIN, default target/debug/pipeline: the export's speed does not
# matter here) and a python with onnxruntime, numpy and onnx (PY, default python3), e.g.
#   python3 -m venv /tmp/ortvenv && /tmp/ortvenv/bin/pip install onnxruntime numpy onnx
#
#   PY=/tmp/ortvenv/bin/python nice -n -15 benches/onnx.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-}"
PY="${PY:-python3}"
BIN="${BIN:-target/debug/pipeline}"
RUNS="${RUNS:-200}"
CORE="${CORE:-0}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$PY" benches/onnx_bench.py make-model "$WORK/tiny"
"$BIN" model export --to onnx --model "$WORK/tiny" --out "$WORK/onnx" >&2
"$PY" benches/onnx_bench.py quantize "$WORK/onnx/model.onnx" "$WORK/onnx/model.int8.onnx"
ls -l "$WORK/onnx" >&2

# One fresh process per measurement, pinned to one core, one onnxruntime thread; fp32 and int8
# alternate so that a noisy neighbour hits both.
: > "$WORK/lines"
for round in 1 2 3; do
  for model in model.onnx model.int8.onnx; do
    taskset -c "$CORE" "$PY" benches/onnx_bench.py time "$WORK/onnx/$model" --seq 128 --runs "$RUNS" \
      | sed "s/^{/{\"round\": $round, /" | tee -a "$WORK/lines"
  done
done
if [[ -n "$OUT" ]]; then
  mkdir -p "$(dirname "$OUT")"
  {
    printf '{"date": "%s", "commit": "%s", "host_cpus": %s, "load_average": "%s"}\n' \
      "$(date -u +%Y-%m-%dT%H:%MZ)" "$(git rev-parse --short HEAD)" "$(nproc)" \
      "$(cut -d' ' -f1-3 /proc/loadavg)"
    cat "$WORK/lines"
  } >> "$OUT"
  echo "appended to $OUT" >&2
fi
