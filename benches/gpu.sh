#!/usr/bin/env bash
# The GPU benchmarks, ours and Hugging Face transformers in one call so the figures are
# comparable: training tokens/s and MFU for albert_zh tiny, base and large at seq 128 and 512,
# and the largest batch that fits per sequence length for base and large (albert_zh's "max batch
# size" table). One JSON object a line into $OUT/gpu.jsonl (the report's throughput table reads
# results/bench/*.jsonl: copy it there).
#
# On the GPU machine (torch and transformers installed there), with the tch build carried over:
#   benches/gpu.sh                      # device cuda:0, fp32 on both sides
#   PRECISION=bf16 benches/gpu.sh       # both in bf16 mixed precision (transformers under autocast)
#   DEVICE=tch-cpu HF_DEVICE=cpu CONFIGS=tiny SEQS=64 MAXBATCH_CONFIGS= STEPS=1 RUNS=1 benches/gpu.sh
#                                       # a dry run of the script itself on a CPU
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-results/bench}"
mkdir -p "$OUT"
FILE="$OUT/gpu.jsonl"
: > "$FILE"
BIN="${BIN:-target/tch/release/pipeline}"
PY="${PY:-python3}"
DEVICE="${DEVICE:-cuda:0}"
HF_DEVICE="${HF_DEVICE:-cuda}"
PRECISION="${PRECISION:-fp32}"
CONFIGS="${CONFIGS:-tiny base large}"
SEQS="${SEQS:-128 512}"
MAXBATCH_CONFIGS="${MAXBATCH_CONFIGS-base large}"
STEPS="${STEPS:-10}"
RUNS="${RUNS:-5}"
# H100/H200 SXM dense bf16; ../shared/docs/GPU.md measured ~790 for bf16 matmuls.
PEAK_TFLOPS="${PEAK_TFLOPS:-989}"
export LD_LIBRARY_PATH="$("$PY" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

record() { grep '^{' | tee -a "$FILE"; }

# Batch per config and length, as albert_zh's tables use them, sized to fit an 80 GB GPU.
batch_for() {
  case "$1:$2" in
    tiny:128) echo 256 ;; tiny:512) echo 64 ;;
    base:128) echo 128 ;; base:512) echo 32 ;;
    large:128) echo 64 ;; large:512) echo 16 ;;
    *) echo 8 ;;
  esac
}

for config in $CONFIGS; do
  for seq in $SEQS; do
    batch="$(batch_for "$config" "$seq")"
    masked=$(( seq * 15 / 100 ))
    echo "+ $config seq $seq batch $batch" >&2
    # Ours first: a failure (out of memory, missing bf16) is recorded, not fatal.
    if ! "$BIN" bench train --model "$config" --batch "$batch" --seq "$seq" --masked "$masked" \
        --steps "$STEPS" --runs "$RUNS" --device "$DEVICE" --precision "$PRECISION" \
        --peak-tflops "$PEAK_TFLOPS" --json | record; then
      echo "{\"bench\":\"train\",\"model\":\"$config\",\"seq\":$seq,\"batch\":$batch,\"device\":\"$DEVICE\",\"precision\":\"$PRECISION\",\"error\":\"failed, see the log\"}" | tee -a "$FILE"
    fi
    "$PY" benches/hf_baseline.py train --config "$config" --batch "$batch" --seq "$seq" \
      --masked "$masked" --steps "$STEPS" --runs "$RUNS" --device "$HF_DEVICE" \
      --dtype "$PRECISION" --peak-tflops "$PEAK_TFLOPS" | record || true
  done
done

# The largest batch that fits: ours by running steps in a child process per size (each starts
# from an empty GPU, and running out of memory ends only the child) with doubling then
# bisection, transformers by its own search. `pretrain`'s `batch_size: auto` probes in process
# instead, powers of two only.
fits() {
  "$BIN" bench train --model "$1" --batch "$3" --seq "$2" --masked $(( $2 * 15 / 100 )) \
    --steps 2 --runs 1 --warmup 0 --device "$DEVICE" --precision "$PRECISION" --json \
    >/dev/null 2>&1
}
for config in $MAXBATCH_CONFIGS; do
  for seq in $SEQS; do
    lo=0; hi=1
    while fits "$config" "$seq" "$hi"; do lo=$hi; hi=$(( hi * 2 )); [[ $hi -gt 16384 ]] && break; done
    while (( hi - lo > 1 )); do
      mid=$(( (lo + hi) / 2 ))
      if fits "$config" "$seq" "$mid"; then lo=$mid; else hi=$mid; fi
    done
    echo "{\"bench\":\"maxbatch\",\"model\":\"$config\",\"seq\":$seq,\"device\":\"$DEVICE\",\"precision\":\"$PRECISION\",\"max_batch\":$lo}" | tee -a "$FILE"
    "$PY" benches/hf_baseline.py maxbatch --config "$config" --seq "$seq" --device "$HF_DEVICE" \
      --dtype "$PRECISION" | record || true
  done
done
echo "wrote $FILE" >&2
