#!/usr/bin/env bash
# The CPU benchmarks behind results/bench/ (the report's throughput table): ours and Hugging Face
# transformers on the same machine, same shapes, alternating. Takes ~15 minutes on 2 cores.
# Needs the release binary (cargo build --release), .venv-torch (scripts/setup-python.sh) and,
# for the tch rows, target/tch/release/pipeline (scripts/build-tch.sh).
#
#   nice -n -15 benches/cpu.sh [OUT]   # writes OUT (results/bench/cpu.jsonl), a JSON object a line
#   ISA=avx2 nice -n -15 benches/cpu.sh results/bench/cpu_avx2.jsonl   # as on an AVX2-only host
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

# Ours against transformers, alternating run by run (ours, transformers, ours, …) for ROUNDS
# rounds; the figure that counts is the median of per-round ratios (benches/cpu_compare.py
# appends every run and one summary line per workload to $OUT, with the date and commit).
# Training tiny (batch 32 × 128, 20 masked), base (batch 8) and inference tiny (64 × 64).
# Run it at a high priority (root: `nice -n -15 benches/cpu.sh`): on a shared machine with the
# kernel's autogroup scheduling on, other sessions' builds take a core each whatever their nice
# value, and every figure then measures the neighbours (`cat /proc/sys/kernel/sched_autogroup_enabled`).
# ISA=avx2 measures an AVX2-only host on an AVX-512 one (cpu_compare.py --isa; every line
# written records the `isa` it ran at).
$PY benches/cpu_compare.py --rounds "${ROUNDS:-3}" --bin "$BIN" --out "$OUT" --isa "${ISA:-native}"

# The libtorch backend on the CPU, when built.
if [[ -x target/tch/release/pipeline ]]; then
  LIB="$(scripts/build-tch.sh --print-libdir)"
  export LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  run target/tch/release/pipeline bench train --device tch-cpu --model tiny --batch 32 --seq 128 --masked 20 --steps 10 --runs 5 --json
  run target/tch/release/pipeline bench infer --device tch-cpu --model tiny --batch 64 --seq 64 --steps 3 --runs 5 --json
fi
echo "wrote $OUT" >&2
