#!/usr/bin/env bash
# How many of libtorch's ops a training step calls, ours against transformers (or another build
# of ours), counted on libtorch's CPU, without a GPU. On a GPU nearly every op that is not a
# view is a kernel launch paid for on the host, and a value read back (`_local_scalar_dense`,
# what `.item()` calls) makes the host wait for the device: a step should read none.
#
#   scripts/build-tch.sh && benches/op_count.sh            # ours against transformers
#   AGAINST=/tmp/before/pipeline benches/op_count.sh       # ours against another build of ours
#   TASK=finetune AGAINST=/tmp/before/pipeline benches/op_count.sh   # fine-tuning steps
#   PRECISION=bf16 benches/op_count.sh                     # bf16 mixed precision
#
# Needs root, `perf` and tracefs (uprobes). Every `at::_ops::<op>::call` in libtorch_cpu.so gets
# a uprobe (group `opcount`, removed at exit), counted through tracefs while one process runs.
# An op reached through the dispatcher counts once a call, and an op made of other ops counts
# them too (`linear` calls `addmm`; `to` calls `_to_copy`, `empty_strided` and `copy_`), so the
# figures are calls, not kernels; views (`view`, `as_strided`, `transpose`, …) launch nothing.
# A step's count is the difference between a run of STEPS + 10 steps and one of 10, divided by
# STEPS: building the model, warm-up and exit cancel out. The model is host_overhead.sh's
# (benches/mini_albert.json), batches of 1 × 8 tokens, one thread.
#
# transformers trains with AdamW, which on a CPU loops over the tensors (~12 calls a tensor,
# and one `item` each for its step count); on CUDA torch's foreach AdamW needs far fewer
# launches and reads nothing back. Ours trains with LAMB.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${BIN:-target/tch/release/pipeline}"
TASK="${TASK:-train}"
PRECISION="${PRECISION:-fp32}"
STEPS="${STEPS:-40}"
PY="${PY:-.venv-torch/bin/python}"
MODEL=benches/mini_albert.json
case "$TASK" in
  train) heads=1 ;;
  finetune) heads=2 ;;
  *) echo "op_count: TASK=$TASK: expected train or finetune" >&2; exit 2 ;;
esac
[[ "$TASK" == train || -n "${AGAINST:-}" ]] ||
  { echo "op_count: TASK=finetune needs AGAINST=<another build of ours>" >&2; exit 2; }
case "$PRECISION" in
  fp32 | bf16) ;;
  *) echo "op_count: PRECISION=$PRECISION: expected fp32 or bf16" >&2; exit 2 ;;
esac
[[ -x "$BIN" ]] || { echo "op_count: no $BIN (scripts/build-tch.sh builds it)" >&2; exit 2; }
[[ -z "${AGAINST:-}" || -x "$AGAINST" ]] ||
  { echo "op_count: AGAINST=$AGAINST is not an executable build of ours" >&2; exit 2; }
# Checked before the probes are placed: placing them takes minutes, and without this the missing
# import surfaced only after ours had been counted.
[[ -n "${AGAINST:-}" ]] || "$PY" -c "import torch, transformers" 2>/dev/null ||
  { echo "op_count: $PY has no torch and transformers (scripts/setup-python.sh)" >&2; exit 2; }
[[ "$(id -u)" == 0 ]] || { echo "op_count: uprobes need root" >&2; exit 2; }
command -v perf >/dev/null || { echo "op_count: needs perf (to place the uprobes)" >&2; exit 2; }
TRACING=/sys/kernel/tracing
[[ -e "$TRACING/uprobe_events" ]] || mount -t tracefs nodev "$TRACING" 2>/dev/null ||
  { echo "op_count: no tracefs at $TRACING" >&2; exit 2; }
LIBDIR="$(scripts/build-tch.sh --print-libdir)"
LIB="$LIBDIR/libtorch_cpu.so"
[[ -f "$LIB" ]] || { echo "op_count: no $LIB" >&2; exit 2; }
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_NUM_THREADS=1 RAYON_NUM_THREADS=1

work="$(mktemp -d)"
cleanup() {
  echo 0 >"$TRACING/events/opcount/enable" 2>/dev/null || true
  echo >"$TRACING/set_event_pid" 2>/dev/null || true
  perf probe -q -d 'opcount:*' >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# One probe per op entry point, by address (perf turns it into the file offset a uprobe takes),
# 100 to a `perf probe` call (it refuses many more).
place_probes() {
  nm -D --defined-only "$LIB" |
    awk '$3 ~ /^_ZN2at4_ops[0-9]+[A-Za-z_0-9]+4callE/ {
      n = $3; sub(/^_ZN2at4_ops[0-9]+/, "", n); sub(/4callE.*/, "", n); print $1, n }' |
    sort -u -k1,1 | awk '{ print "o" NR, $1, $2 }' >"$work/ops"
  split -l 100 "$work/ops" "$work/chunk."
  for chunk in "$work"/chunk.*; do
    # shellcheck disable=SC2046
    perf probe -q -x "$LIB" $(awk '{ printf "-a opcount:%s=0x%s ", $1, $2 }' "$chunk") >/dev/null
  done
}

# The calls of each op by "$@" (its threads and children included, no other process), as
# `event count` lines.
count() {
  echo >"$TRACING/trace"
  echo 1 >"$TRACING/options/event-fork"
  echo 1 >"$TRACING/events/opcount/enable"
  # shellcheck disable=SC2016
  sh -c 'echo $$ >"$0/set_event_pid"; shift; exec "$@"' "$TRACING" - "$@" \
    >/dev/null 2>"$work/stderr" || { cat "$work/stderr" >&2; return 1; }
  echo 0 >"$TRACING/events/opcount/enable"
  echo >"$TRACING/set_event_pid"
  # A line is `comm-pid [cpu] flags time: oN: (address)`; an overflow says `LOST n EVENTS`.
  if grep -q 'LOST [0-9]* EVENTS' "$TRACING/trace"; then
    echo "op_count: the trace buffer overflowed (fewer STEPS)" >&2
    return 1
  fi
  { grep -oE ' o[0-9]+: \(' "$TRACING/trace" || true; } | awk '{ sub(/:$/, "", $1); n[$1]++ }
    END { for (e in n) print e, n[e] }'
}

shape=(--batch 1 --seq 8 --masked 1 --runs 1 --warmup 2)
ours() {
  count "$1" bench "$TASK" --device tch-cpu --model "$MODEL" "${shape[@]}" \
    --precision "$PRECISION" --steps "$2"
}
theirs() {
  if [[ -n "${AGAINST:-}" ]]; then
    ours "$AGAINST" "$1"
    return
  fi
  count "$PY" benches/hf_baseline.py train --config "$MODEL" "${shape[@]}" \
    --dtype "$PRECISION" --threads 1 --steps "$1"
}

place_probes
echo 262144 >"$TRACING/buffer_size_kb"
ours "$BIN" 10 >"$work/a0"; ours "$BIN" $((STEPS + 10)) >"$work/a1"
theirs 10 >"$work/b0"; theirs $((STEPS + 10)) >"$work/b1"
"$PY" - "$work" "$STEPS" "$heads" "${AGAINST:-transformers}" <<'PY'
import sys
from pathlib import Path

work, steps, heads, other = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
names = dict(line.split()[0::2] for line in (work / "ops").read_text().splitlines())
views = {"as_strided", "view", "transpose_int", "resolve_conj", "reshape", "t", "expand",
         "slice_Tensor", "select_int", "detach", "narrow", "unsqueeze", "unbind_int",
         "_reshape_alias", "_unsafe_view", "view_as", "alias", "permute", "squeeze_dim",
         "split_with_sizes", "split_Tensor", "chunk", "result_type_Scalar", "result_type_Tensor",
         "empty_memory_format", "empty_strided", "empty_like", "resize_", "is_nonzero"}

def per_step(a, b):
    def load(name):
        return {names[e]: int(c) for e, c in
                (l.split() for l in (work / name).read_text().splitlines())}
    x, y = load(a), load(b)
    return {k: (y.get(k, 0) - x.get(k, 0)) / (steps * heads) for k in set(x) | set(y)}

ours, theirs = per_step("a0", "a1"), per_step("b0", "b1")
keys = sorted(set(ours) | set(theirs), key=lambda k: -(ours.get(k, 0) + theirs.get(k, 0)))
print(f"{'op (calls a step)':52s} {'ours':>8s} {other[-12:]:>12s}")
for k in keys:
    o, t = ours.get(k, 0), theirs.get(k, 0)
    if abs(o) >= 0.5 or abs(t) >= 0.5:
        print(f"{k:52s} {o:8.1f} {t:12.1f}")
for label, pick in [("all calls", lambda k: True), ("calls that are not views", lambda k: k not in views)]:
    o = sum(v for k, v in ours.items() if pick(k))
    t = sum(v for k, v in theirs.items() if pick(k))
    print(f"{label:52s} {o:8.1f} {t:12.1f}")
reads = "_local_scalar_dense"
print(f"{'values read back (' + reads + ')':52s} {ours.get(reads, 0):8.1f} {theirs.get(reads, 0):12.1f}")
PY
