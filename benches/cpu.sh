#!/usr/bin/env bash
# The CPU benchmarks behind results/bench/ (the report's throughput table): ours and Hugging Face
# transformers on the same machine, same shapes. Run on a quiet machine; takes ~15 minutes on
# 2 cores. Needs the release binary (cargo build --release), .venv-torch (scripts/setup-python.sh)
# and, for the tch rows, target/tch/release/pipeline (scripts/build-tch.sh).
#
#   benches/cpu.sh            # writes results/bench/cpu-<hostname>.jsonl (one JSON object a line)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/bench/cpu.jsonl}"
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
PY=.venv-torch/bin/python
BIN=target/release/pipeline
run() { echo "+ $*" >&2; "$@" | grep '^{' | tee -a "$OUT"; }

export PIPELINE_DATA_ROOT="${PIPELINE_DATA_ROOT:-$(cd .. && pwd)/shared/datasets}"
run cargo bench -q -p stage-clean --bench clean
run cargo bench -q -p stage-mask --bench mask

# Training, albert_zh tiny (issue 4's comparison): batch 32, seq 128, 20 masked, 10 steps × 5.
run $BIN bench train --model tiny --batch 32 --seq 128 --masked 20 --steps 10 --runs 5 --json
run $PY benches/hf_baseline.py train --config tiny --batch 32 --seq 128 --masked 20 --steps 10 --runs 5 --threads 2 --device cpu
# albert_zh base at batch 8.
run $BIN bench train --model base --batch 8 --seq 128 --masked 20 --steps 3 --runs 3 --json
run $PY benches/hf_baseline.py train --config base --batch 8 --seq 128 --masked 20 --steps 3 --runs 3 --threads 2 --device cpu
# Inference (issue 5's comparison): AlbertModel forward, tiny, batch 64, seq 64.
run $BIN bench infer --model tiny --batch 64 --seq 64 --steps 3 --runs 5 --split --json
run $BIN bench infer --model tiny --batch 64 --seq 64 --steps 3 --runs 5 --json
run $PY benches/hf_baseline.py infer --config tiny --batch 64 --seq 64 --threads 2 --runs 5

# The libtorch backend on the CPU, when built.
if [[ -x target/tch/release/pipeline ]]; then
  LIB="$(scripts/build-tch.sh --print-libdir)"
  export LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  run target/tch/release/pipeline bench train --device tch-cpu --model tiny --batch 32 --seq 128 --masked 20 --steps 10 --runs 5 --json
  run target/tch/release/pipeline bench infer --device tch-cpu --model tiny --batch 64 --seq 64 --steps 3 --runs 5 --json
fi
echo "wrote $OUT" >&2
