#!/usr/bin/env bash
# The host's cost of a training step on libtorch, ours against transformers: what sets the pace
# of a model as small as `tiny` on a GPU (the host queues kernels faster than they run only if
# it has little to do per op), measured on libtorch's CPU, without a GPU.
#
#   scripts/build-tch.sh && benches/host_overhead.sh         # target/tch/release/pipeline
#   BIN=/tmp/other-build/pipeline ROUNDS=3 benches/host_overhead.sh
#   AGAINST=/tmp/before/pipeline benches/host_overhead.sh   # ours against another build of ours
#   TASK=finetune AGAINST=/tmp/before/pipeline benches/host_overhead.sh   # fine-tuning steps
#   PRECISION=bf16 AGAINST=/tmp/before/pipeline benches/host_overhead.sh  # bf16 mixed precision
#
# The model is albert_zh tiny's structure (4 layers, 12 heads, post-LN, one shared layer)
# shrunk to H 24, E 16, FFN 48 and a vocabulary of 64, trained on batches of 1 × 8 tokens, so
# that the arithmetic is next to nothing and a step's time is the op stream's own: dispatch,
# autograd bookkeeping, the optimiser's per-tensor calls. Both sides run on one thread. A
# step's CPU time is the difference between a run of STEPS + 50 steps and one of 50, divided
# by STEPS (start-up, model building and warm-up cancel out); ours and transformers alternate,
# and each round prints both and the ratio, then the median ratio. With AGAINST, the other
# side is that build of ours instead of transformers (a change's before and after).
#
# transformers trains with AdamW (benches/hf_baseline.py), which on a CPU loops over the
# tensors one op at a time; on CUDA torch's foreach AdamW needs far fewer launches, so this
# proxy flatters ours on the optimiser's share. Ours trains with LAMB.
#
# TASK=finetune times `pipeline bench finetune` instead (AdamW, the classification and the span
# head in turn, both counted in a step's average); transformers' side has no fine-tuning bench,
# so it needs AGAINST.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${BIN:-target/tch/release/pipeline}"
TASK="${TASK:-train}"
case "$TASK" in
  train) heads=1 ;;
  finetune)
    heads=2
    [[ -n "${AGAINST:-}" ]] || {
      echo "host_overhead: TASK=finetune needs AGAINST=<another build of ours>" >&2; exit 2; }
    ;;
  *) echo "host_overhead: TASK=$TASK: expected train or finetune" >&2; exit 2 ;;
esac
PRECISION="${PRECISION:-fp32}"
case "$PRECISION" in
  fp32 | bf16) ;;
  *) echo "host_overhead: PRECISION=$PRECISION: expected fp32 or bf16" >&2; exit 2 ;;
esac
ROUNDS="${ROUNDS:-5}"
STEPS="${STEPS:-2000}"
PY="${PY:-.venv-torch/bin/python}"
[[ -x "$BIN" ]] || { echo "host_overhead: no $BIN (scripts/build-tch.sh builds it)" >&2; exit 2; }
[[ -z "${AGAINST:-}" || -x "$AGAINST" ]] ||
  { echo "host_overhead: AGAINST=$AGAINST is not an executable build of ours" >&2; exit 2; }
# transformers is the other side only without AGAINST.
[[ -n "${AGAINST:-}" ]] || "$PY" -c "import torch, transformers" 2>/dev/null ||
  { echo "host_overhead: $PY has no torch and transformers (scripts/setup-python.sh)" >&2; exit 2; }
export LD_LIBRARY_PATH
LD_LIBRARY_PATH="$(scripts/build-tch.sh --print-libdir)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_NUM_THREADS=1 RAYON_NUM_THREADS=1

# albert_zh tiny's structure, shrunk (shared with benches/op_count.sh).
MODEL=benches/mini_albert.json

# CPU seconds (user + system) of a command and its children.
cpu_seconds() {
  "$PY" -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)' "$@"
}
shape=(--batch 1 --seq 8 --masked 1 --runs 1 --warmup 5)
ours() {
  cpu_seconds "$BIN" bench "$TASK" --device tch-cpu --model "$MODEL" "${shape[@]}" \
    --precision "$PRECISION" --steps "$1"
}
theirs() {
  if [[ -n "${AGAINST:-}" ]]; then
    cpu_seconds "$AGAINST" bench "$TASK" --device tch-cpu --model "$MODEL" "${shape[@]}" \
      --precision "$PRECISION" --steps "$1"
    return
  fi
  # transformers' bf16 is torch.autocast over float32 weights, as ours.
  cpu_seconds "$PY" benches/hf_baseline.py train --config "$MODEL" "${shape[@]}" \
    --dtype "$PRECISION" --threads 1 --steps "$1"
}
other="${AGAINST:-transformers}"

ratios=()
for round in $(seq "$ROUNDS"); do
  a0=$(ours 50); a1=$(ours $((STEPS + 50)))
  b0=$(theirs 50); b1=$(theirs $((STEPS + 50)))
  line=$("$PY" -c "a = ($a1 - $a0) / ($STEPS * $heads) * 1e3; b = ($b1 - $b0) / ($STEPS * $heads) * 1e3
print(f'{a:.3f} {b:.3f} {b / a:.3f}')")
  read -r a b ratio <<<"$line"
  echo "round $round: ours $a ms, $other $b ms of CPU a step: $other/ours $ratio"
  ratios+=("$ratio")
done
"$PY" -c "import statistics, sys; print(f'median {sys.argv[1]}/ours: {statistics.median(map(float, sys.argv[2:])):.2f} ({len(sys.argv) - 2} rounds)')" "$other" "${ratios[@]}"
