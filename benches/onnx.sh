#!/usr/bin/env bash
# The exported ONNX model on one core: single-sequence latency (median of RUNS, default 200)
# and peak memory (the process's ru_maxrss) at length 128, for an albert_tiny_zh-sized
# classifier with random weights (timing does not depend on the values), fp32 as exported and
# int8 after onnxruntime's dynamic quantisation. One JSON line per measurement on stdout (and
# appended to OUT when given, after a line with the date and commit); results/bench/onnx.md
# says what they measured.
#
# Two hosts run the model, alternating: onnxruntime's Python module (benches/onnx_bench.py) and
# benches/onnx_host, a Rust program on onnxruntime's C API (the ort crate) without Python, as an
# app would host the model; it loads the very libonnxruntime.so of PY's onnxruntime (override
# with ORT_DYLIB_PATH) and checks that its outputs equal the Python host's. HOSTS picks them
# (default "python rust"; where cargo cannot build onnx_host and HOSTS was not given, the Rust
# host is left out with a note).
#
# Needs the pipeline binary (BIN, default target/debug/pipeline: the export's speed does not
# matter here), a python with onnxruntime, numpy and onnx (PY, default python3), e.g.
#   python3 -m venv /tmp/ortvenv && /tmp/ortvenv/bin/pip install onnxruntime numpy onnx
# and cargo for the Rust host.
#
#   PY=/tmp/ortvenv/bin/python nice -n -15 benches/onnx.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-}"
PY="${PY:-python3}"
BIN="${BIN:-target/debug/pipeline}"
RUNS="${RUNS:-200}"
CORE="${CORE:-0}"
HOSTS_GIVEN="${HOSTS+yes}"
HOSTS="${HOSTS:-python rust}"
RUST_HOST=benches/onnx_host/target/release/onnx_host
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if [[ " $HOSTS " == *" rust "* ]]; then
  if ! cargo build --release --quiet --manifest-path benches/onnx_host/Cargo.toml >&2; then
    [[ -n "$HOSTS_GIVEN" ]] && { echo "onnx.sh: benches/onnx_host did not build" >&2; exit 1; }
    echo "onnx.sh: benches/onnx_host did not build; measuring the Python host only" >&2
    HOSTS=python
  fi
  # The shared library inside PY's onnxruntime wheel, so that both hosts run the same build.
  export ORT_DYLIB_PATH="${ORT_DYLIB_PATH:-$("$PY" -c 'import glob, os, onnxruntime
print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))[-1])')}"
fi

"$PY" benches/onnx_bench.py make-model "$WORK/tiny"
"$BIN" model export --to onnx --model "$WORK/tiny" --out "$WORK/onnx" >&2
"$PY" benches/onnx_bench.py quantize "$WORK/onnx/model.onnx" "$WORK/onnx/model.int8.onnx"
for model in model.onnx model.int8.onnx; do
  # The inputs onnx_bench.py times, with the Python host's outputs for the Rust host to match.
  "$PY" benches/onnx_bench.py feed "$WORK/onnx/$model" "$WORK/onnx/$model.feed.json" --seq 128
done
ls -l "$WORK/onnx" >&2

measure() { # HOST MODEL: one JSON line, from a fresh process pinned to CORE
  case "$1" in
    python) taskset -c "$CORE" "$PY" benches/onnx_bench.py time "$WORK/onnx/$2" --seq 128 \
      --runs "$RUNS" ;;
    rust) taskset -c "$CORE" "$RUST_HOST" "$WORK/onnx/$2" --feed "$WORK/onnx/$2.feed.json" \
      --runs "$RUNS" ;;
  esac
}

# One fresh process per measurement, pinned to one core, one onnxruntime thread; hosts and
# fp32/int8 alternate so that a noisy neighbour hits all of them.
: > "$WORK/lines"
for round in 1 2 3; do
  for model in model.onnx model.int8.onnx; do
    for host in $HOSTS; do
      measure "$host" "$model" \
        | sed "s/^{/{\"round\": $round, /" | tee -a "$WORK/lines"
    done
  done
done
# The Rust host's outputs must be the Python host's (the parity bound of the export's tests):
# a timing of a host that computes something else is not a figure of this model.
"$PY" - "$WORK/lines" <<'PY'
import json, sys
diff = lambda l: l.get("max_abs_diff_vs_python", 0.0)  # null where it was NaN
bad = [l for l in map(json.loads, open(sys.argv[1]))
       if not (isinstance(diff(l), (int, float)) and diff(l) <= 1e-4)]
if bad:
    sys.exit(f"the Rust host's outputs differ from the Python host's by more than 1e-4: {bad}")
PY
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
