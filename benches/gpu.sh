#!/usr/bin/env bash
# The GPU benchmarks in one call, ours and Hugging Face transformers alternating on the same GPU
# so that the figures compare: training tokens/s and MFU for albert_zh shapes in fp32 and bf16
# (transformers under torch.autocast, with SDPA and with eager attention), then the largest
# batch that fits per config and length (albert_zh's "max batch size" table). One JSON object a
# line into $OUT/gpu.jsonl (the runs' logs into $OUT/gpu.log); copied into results/bench/, the
# report's throughput and largest-batch tables read it.
#
# Rounds: each round runs every shape and precision, ours and transformers' one after the other
# (ours first in odd rounds, last in even ones), and tags its lines with `call` (the round's
# number), so that the report compares ours only with transformers' of the same round and
# quotes the median of the rounds' ratios. A round starts only when the time it is expected to
# take (the longest so far) fits before DEADLINE seconds; the largest-batch searches follow
# under the same rule, so the call ends within DEADLINE plus one search.
#
# On the GPU machine (torch and transformers installed there), with the tch build carried over:
#   benches/gpu.sh                            # device cuda:0, DEADLINE 270 s
#   SHAPES="tiny:256:128" ROUNDS=5 benches/gpu.sh
#   DEVICE=tch-cpu HF_DEVICE=cpu SHAPES=tiny:4:32 PRECISIONS=fp32 STEPS=1 RUNS=1 \
#     MAXBATCH=tiny:32 MAXBATCH_CAP=8 OUT=/tmp/gpu benches/gpu.sh
#                                             # a dry run of the script itself on a CPU
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-results/bench}"
mkdir -p "$OUT"
FILE="$OUT/gpu.jsonl"
: > "$FILE"
# Everything said on stderr (each run's log, a crash's message) also goes to $OUT/gpu.log, which
# comes back with the call: the 2026-11-29 call was stopped at its limit, and with it the tail
# that held why ours failed in bf16.
exec 2> >(tee -a "$OUT/gpu.log" >&2)
BIN="${BIN:-target/tch/release/pipeline}"
PY="${PY:-python3}"
DEVICE="${DEVICE:-cuda:0}"
HF_DEVICE="${HF_DEVICE:-cuda}"
# model:batch:seq, in the order the GPU-speed targets name them; large last, where time allows.
SHAPES="${SHAPES:-tiny:256:128 base:128:128 base:32:512 large:64:128}"
PRECISIONS="${PRECISIONS:-fp32 bf16}"
ATTNS="${ATTNS:-sdpa eager}"
ROUNDS="${ROUNDS:-3}"
STEPS="${STEPS:-10}"
RUNS="${RUNS:-3}"
DEADLINE="${DEADLINE:-270}"
# model:seq for the largest-batch searches, in bf16 (how the GPU is trained on) unless
# MAXBATCH_PRECISION says otherwise; to within MAXBATCH_GRANULARITY rows.
MAXBATCH="${MAXBATCH-base:128 base:512 large:128 large:512}"
MAXBATCH_PRECISION="${MAXBATCH_PRECISION:-bf16}"
MAXBATCH_GRANULARITY="${MAXBATCH_GRANULARITY:-8}"
MAXBATCH_CAP="${MAXBATCH_CAP:-16384}"
# H100/H200 SXM dense bf16; ../shared/docs/GPU.md measured ~790 for bf16 matmuls.
PEAK_TFLOPS="${PEAK_TFLOPS:-989}"
export LD_LIBRARY_PATH="$("$PY" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

START=$SECONDS
LONGEST=0

# Adds `"call": $1` to each JSON line of stdin (the bench lines are one object a line, `}` last)
# and appends them to the file.
record() { grep '^{' | sed "s/}\$/,\"call\":$1}/" | tee -a "$FILE"; }

# A line saying what failed, so that a missing row is explained rather than silent.
failed() {
  echo "{\"bench\":\"$1\",\"model\":\"$2\",\"batch\":$3,\"seq\":$4,\"precision\":\"$5\",\"device\":\"$6\",\"error\":\"failed, see gpu.log\",\"call\":$7}" \
    | tee -a "$FILE"
}

# Whether something expected to take $1 seconds still fits before the deadline.
time_for() { (( SECONDS - START + $1 <= DEADLINE )); }

ours() {
  local model="$1" batch="$2" seq="$3" precision="$4" call="$5"
  timeout 120 "$BIN" bench train --model "$model" --batch "$batch" --seq "$seq" \
    --masked $(( seq * 15 / 100 )) --steps "$STEPS" --runs "$RUNS" --device "$DEVICE" \
    --precision "$precision" --peak-tflops "$PEAK_TFLOPS" --json | record "$call" \
    || failed train "$model" "$batch" "$seq" "$precision" "$DEVICE" "$call"
}

theirs() {
  local model="$1" batch="$2" seq="$3" precision="$4" call="$5" attn
  for attn in $ATTNS; do
    timeout 120 "$PY" benches/hf_baseline.py train --config "$model" --batch "$batch" \
      --seq "$seq" --masked $(( seq * 15 / 100 )) --steps "$STEPS" --runs "$RUNS" \
      --device "$HF_DEVICE" --dtype "$precision" --attn "$attn" --peak-tflops "$PEAK_TFLOPS" \
      | record "$call" || failed "hf_train ($attn)" "$model" "$batch" "$seq" "$precision" "$HF_DEVICE" "$call"
  done
}

# One round: every shape and precision, ours and transformers' in the round's order.
round() {
  local call="$1" shape model batch seq precision
  for shape in $SHAPES; do
    IFS=: read -r model batch seq <<< "$shape"
    for precision in $PRECISIONS; do
      echo "+ round $call: $model batch $batch seq $seq $precision" >&2
      if (( call % 2 == 1 )); then
        ours "$model" "$batch" "$seq" "$precision" "$call"
        theirs "$model" "$batch" "$seq" "$precision" "$call"
      else
        theirs "$model" "$batch" "$seq" "$precision" "$call"
        ours "$model" "$batch" "$seq" "$precision" "$call"
      fi
    done
  done
}

for (( call = 1; call <= ROUNDS; call++ )); do
  if ! time_for "$LONGEST"; then
    echo "gpu.sh: round $call would pass the deadline of $DEADLINE s; stopping the rounds" >&2
    break
  fi
  began=$SECONDS
  round "$call"
  (( SECONDS - began > LONGEST )) && LONGEST=$(( SECONDS - began ))
done

# The largest batch that fits: ours (`pipeline bench maxbatch`: each size `bench train` in a
# process of its own) and transformers' (its own search, in one process, emptying torch's cache
# between sizes), the same doubling and halving to the same granularity.
LONGEST=0
for item in $MAXBATCH; do
  IFS=: read -r model seq <<< "$item"
  if ! time_for "$LONGEST"; then
    echo "gpu.sh: the search for $model seq $seq would pass the deadline; stopping" >&2
    break
  fi
  began=$SECONDS
  echo "+ largest batch: $model seq $seq $MAXBATCH_PRECISION" >&2
  timeout 240 "$BIN" bench maxbatch --model "$model" --seq "$seq" --masked $(( seq * 15 / 100 )) \
    --device "$DEVICE" --precision "$MAXBATCH_PRECISION" --max-batch "$MAXBATCH_CAP" \
    --granularity "$MAXBATCH_GRANULARITY" --json | record 0 \
    || failed maxbatch "$model" 0 "$seq" "$MAXBATCH_PRECISION" "$DEVICE" 0
  timeout 240 "$PY" benches/hf_baseline.py maxbatch --config "$model" --seq "$seq" \
    --masked $(( seq * 15 / 100 )) --device "$HF_DEVICE" --dtype "$MAXBATCH_PRECISION" \
    --max-batch "$MAXBATCH_CAP" --granularity "$MAXBATCH_GRANULARITY" | record 0 \
    || failed hf_maxbatch "$model" 0 "$seq" "$MAXBATCH_PRECISION" "$HF_DEVICE" 0
  (( SECONDS - began > LONGEST )) && LONGEST=$(( SECONDS - began ))
done
echo "wrote $FILE in $(( SECONDS - START )) s" >&2
