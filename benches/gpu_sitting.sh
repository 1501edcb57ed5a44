#!/usr/bin/env bash
# One sitting of a pipeline file on a lent GPU, in one call: the tch build and the data it reads
# travel in .gpu/ (git-ignored), the store stays on the GPU machine (it does not travel), and
# what the sitting published and measured comes back under $OUT.
#
# Any pipeline file (ablations.yaml by default), everything run there:
#   benches/gpu_sitting.sh prepare                    # here: strip the tch binary, pack binary + data
#   FILE=ablations.yaml TARGET=report COMMIT=abc1234 \
#     DEADLINE=480 benches/gpu_sitting.sh run         # there: the sitting, stopped at the deadline
#
# The committed experiment (experiment.yaml) at GPU scale, the GPU doing only what needs it:
#   benches/gpu_sitting.sh prepare                    # here, as above
#   benches/gpu_sitting.sh stage                      # here: clean, vocab and the baselines, pushed
#                                                     #   to a directory remote, packed in .gpu/
#   COMMIT=abc1234 benches/gpu_sitting.sh evidence    # there: pull, a throughput bench that sizes
#                                                     #   pretraining (and times a step's phases),
#                                                     #   mask, pretraining (all the time the rest
#                                                     #   leaves), each task's fine-tuning
#                                                     #   learning rate chosen on dev, the
#                                                     #   fine-tuning grid, report
#                                                     #   (skipped below MIN_TOKENS); a kernel
#                                                     #   profile and bench rounds only with
#                                                     #   what is left
#   OUT=… benches/gpu_sitting.sh profile              # there: tiny's host trace (trace.txt,
#                                                     #   trace.json.gz), the kernel profile and
#                                                     #   the step's operators by call path
#                                                     #   (ops.json) alone (a second call,
#                                                     #   before benches/gpu.sh)
# (the device tool: `carry: [".gpu"]`, command `COMMIT=… benches/gpu_sitting.sh evidence`).
#   DEVICE=tch-cpu HF_DEVICE=cpu SMALL=1 OUT=/tmp/o benches/gpu_sitting.sh evidence
#                                                     # a dry run of the whole call on a CPU
#
# A fresh GPU machine has no Rust toolchain and no network; PyTorch 2.11 (cu130) is in its
# python3, and the tch binary loads that libtorch (../shared/docs/GPU.md). Stages with
# `resources: {gpu: 1}` share the one GPU (`--gpus`), the machine's 16 cores run them at once.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

# The same absolute paths here and there: the data stages' fingerprints hold their input paths,
# so the artifacts made here are the ones the GPU machine's plan asks for.
ROOT=/tmp/gpu
WS="$ROOT/ws"
DATA="$ROOT/data"
REMOTE="$ROOT/remote"

prepare() {
  local bin="${BIN:-target/tch/release/pipeline}" data="${DATA_SRC:-../shared/datasets}"
  rm -rf .gpu && mkdir -p .gpu
  # Debug info goes, the symbol table stays: `--count-syncs` names the functions on the first
  # sync's call stack from it (18.9 MB compressed against 15.5 MB with every symbol stripped).
  strip --strip-debug -o .gpu/pipeline "$bin"
  # xz, not gzip: 1.5x smaller, and the call's working tree with .gpu/ must stay under 64 MiB.
  # The GPU machine may lack the xz tool; its python3 has lzma (unpack below).
  xz -9 -T0 .gpu/pipeline
  # Everything the experiment files read: the general corpus, the eight tasks (fine-tuning and
  # decontamination) and the vocabulary. The ChnSentiCorp reviews file (every test text) is
  # left out of the corpus by the files' inputs anyway, so it does not travel.
  tar -C "$data" --exclude=corpus/misc/chnsenticorp_reviews.txt -czf .gpu/data.tar.gz \
    corpus vocab chnsenticorp smp2020_ewect msra_ner lcqmc afqmc nli_extra xnli_zh \
    cmrc2018/dev.json c3/dev.json
  du -sh .gpu/*
}

# Unpacks the data and the binary into $ROOT (here and there alike); the workspace and its
# store are kept, so that `stage` run again here reuses what it made.
unpack() {
  rm -rf "$DATA" "$ROOT/pipeline" && mkdir -p "$DATA" "$WS"
  tar -C "$DATA" -xzf .gpu/data.tar.gz
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    .gpu/pipeline.xz "$ROOT/pipeline"
  chmod +x "$ROOT/pipeline"
}

run() {
  : "${OUT:?set OUT}"
  local file="${FILE:-ablations.yaml}" target="${TARGET:-report}" deadline="${DEADLINE:-480}"
  local bin="$ROOT/pipeline"
  unpack
  torch_libs
  { nvidia-smi -L || true; nproc; } > "$OUT/gpu.txt"
  cp "$file" "$WS/pipeline.yaml"
  cd "$WS"
  local start=$SECONDS
  timeout --signal=INT --kill-after=20 "$deadline" "$bin" run "$target" --jobs 12 --gpus 12 \
    --set data="$DATA" --set "device=${DEVICE:-cuda:0}" --set "commit='${COMMIT:-}'" ${EXTRA:-} \
    > "$OUT/run.log" 2>&1 || echo "run: exit $? after $((SECONDS - start)) s" >> "$OUT/run.log"
  echo "sitting: $((SECONDS - start)) s" >> "$OUT/run.log"
  collect
}

# torch's libraries for the tch binary: the GPU machine's python3 has torch; here, .venv-torch's.
torch_libs() {
  local py=python3
  if [[ -x "$REPO/.venv-torch/bin/python" ]]; then py="$REPO/.venv-torch/bin/python"; fi
  LD_LIBRARY_PATH="$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
  export LD_LIBRARY_PATH
}

# The GPU scale of experiment.yaml (results/pretraining-recipe.md says why each value): the
# same file and protocols as on the CPU, with the budget's caps lifted (the caps cover every
# train split the shared data has), batch sizes changed, and 20 masking passes (the sitting
# pretrains on ~80 passes over the corpus' text: 5 maskings were seen ~20 times each). Epochs:
# the grid's GPU time goes by its optimiser steps, not its tokens (12 processes time-share the
# GPU at ~6.8 ms a step, whatever the step's length: the 2026-11-30 sitting's 10,048 steps took
# 68 s), so the two smallest train splits, whose dev scores still rose at their last epoch
# there, get more epochs: ChnSentiCorp 5 (350 steps), MSRA NER 8 (528); the rest 2. These
# sets hold for the data stages and baselines too, so both machines plan the same fingerprints.
# The pretraining batch and learning rate are the call's (`pretrain_plan`). SMALL=1 (a dry run
# on a CPU) keeps the shapes tiny.
scale_sets() {
  local single=30000 pair=50000 epochs=2 cepochs=5 fbatch=128 flr=2.0e-4 nbatch=32 nepochs=8
  local dupe=20
  local pbatch="${PRETRAIN_BATCH:-256}" stage
  if [[ -n "${SMALL:-}" ]]; then
    single=64; pair=64; epochs=1; cepochs=1; fbatch=16; pbatch=8; nbatch=16; nepochs=1; dupe=2
    for stage in $(stages_named '\(finetune\|baseline\)_'); do
      echo --set "$stage.max_eval_examples=64"
    done
    for stage in $(stages_named '\(finetune\|baseline\)_msra_ner'); do
      echo --set "$stage.max_train_examples=64"
    done
  fi
  echo --set "data=$DATA" --set mask.pack=true --set "mask.dupe_factor=$dupe" \
    --set "single_max_train_examples=$single" --set "pair_max_train_examples=$pair" \
    --set "finetune_epochs=$epochs" --set "chnsenticorp_epochs=$cepochs" \
    --set "finetune_batch_size=$fbatch" \
    --set "finetune_learning_rate=$flr" \
    --set "msra_ner_batch_size=$nbatch" --set "msra_ner_epochs=$nepochs" \
    --set "pretrain_batch_size=$pbatch" --set pretrain_learning_rate=8.0e-3
}

# Here: what of the GPU-scale plan needs no GPU and travels (clean, vocab, the baselines), run
# on this machine's cores in a workspace of its own, pushed to a directory remote, and packed
# into .gpu/remote.tgz. `mask` runs there on the 16 cores: its shards (uncompressed int32
# Arrow, ~5 bytes a token, several hundred MB at dupe_factor 5) are over what a call carries.
stage() {
  local ws="$ROOT/stage"
  unpack
  torch_libs
  mkdir -p "$ws" && cp experiment.yaml "$ws/pipeline.yaml"
  rm -rf "$REMOTE"
  # shellcheck disable=SC2046 # the sets are words on purpose
  (cd "$ws" && "$ROOT/pipeline" run clean vocab $(baseline_targets) $(scale_sets) \
    && "$ROOT/pipeline" push clean vocab $(baseline_targets) --remote "$REMOTE" $(scale_sets))
  tar -C "$ROOT" -czf "$(remote_archive)" remote
  du -sh "$REMOTE" .gpu/* "$(remote_archive)"
}

# Where `stage` packs the remote and `evidence` unpacks it: .gpu/remote.tgz at GPU scale (it
# travels), beside the workspace for a SMALL dry run, so that a dry run never leaves .gpu/
# holding the dry run's data (a real sitting would then find none of its own and make it all
# on device time).
remote_archive() {
  if [[ -n "${SMALL:-}" ]]; then echo "$ROOT/remote-small.tgz"; else echo .gpu/remote.tgz; fi
}

baseline_targets() {
  stages_named baseline_
}

# The stages of experiment.yaml whose names start with the pattern $1 (a stage's line is its
# name and a colon alone; a var's line has a value after the colon).
stages_named() {
  grep -o "^  $1[a-z0-9_]*:\$" "$REPO/experiment.yaml" | tr -d ' :'
}

# There: the committed experiment at GPU scale in one call, within $DEADLINE seconds.
evidence() {
  : "${OUT:?set OUT}"
  local deadline="${DEADLINE:-570}" start=$SECONDS bin="$ROOT/pipeline"
  case "${FIRST_ROUND:-slim}" in
    slim | full) ;;
    *) echo "FIRST_ROUND=$FIRST_ROUND: expected slim or full" >&2; exit 2 ;;
  esac
  rm -rf "$WS" "$REMOTE"
  unpack
  tar -C "$ROOT" -xzf "$(remote_archive)"
  torch_libs
  # The machine first, in the run log. The device tool brings back at most 8 files: the call's
  # own `tee $OUT/sitting.log`, run.log, bench.jsonl, bench.err, results.tgz, store.tgz,
  # pretrained.tgz and kernels.txt are eight.
  { nvidia-smi -L || true; nproc; date -u; } > "$OUT/run.log" 2>&1
  cp experiment.yaml "$WS/pipeline.yaml"
  # shellcheck disable=SC2046
  (cd "$WS" && "$bin" pull --remote "$REMOTE" $(scale_sets)) >> "$OUT/run.log" 2>&1 \
    || echo "pull: exit $? (the run makes what is missing)" >> "$OUT/run.log"
  bench_round tiny 256 128 first
  # The report's throughput table reads the bench lines under the workspace's results/bench.
  mkdir -p "$WS/results/bench" && cp results/bench/*.jsonl "$WS/results/bench/"
  cp "$OUT/bench.jsonl" "$WS/results/bench/gpu.jsonl"
  # Pretraining gets what the deadline leaves after the rest of the experiment, unless
  # PRETRAIN_S says: REST_S (270 s; 200 without a learning-rate grid) for mask, the choice of
  # the fine-tuning learning rates, the fine-tuning grid and the report, and the 30 s the
  # experiment's timeout keeps for collecting what it made. The grid's time goes by its steps
  # (the 2026-11-30 sitting: 10,048 steps in 68 s); scale_sets' epochs make 19,296: ~131 s,
  # with ~10 s for mask and the report; the rates' choice ~25 s a rate (`choose_learning_rates`).
  local steps precision batch lr
  local rest=200
  [[ -z "$(lr_grid)" ]] || rest=270
  local seconds="${PRETRAIN_S:-$(( deadline - (SECONDS - start) - ${REST_S:-$rest} ))}"
  read -r steps precision batch lr < <(pretrain_plan "$seconds")
  if (( steps > 0 )); then
    echo "pretraining: $steps steps of $batch x 128 in $precision at lr $lr, ~$seconds s" \
      "(sized from the bench above)" | tee -a "$OUT/run.log"
    experiment "$steps" "$precision" "$batch" "$lr" $(( deadline - (SECONDS - start) - 30 ))
  else
    # At this rate the experiment would end at the no-context floor again (the 2026-11-29
    # sitting: 28.8 M tokens, MLM 15.35 %): the time goes to finding out why a step is slow.
    echo "pretraining: skipped: at the first round's rate $seconds s give fewer" \
      "than ${MIN_TOKENS:-1e8} tokens" | tee -a "$OUT/run.log"
  fi
  echo "sitting: $((SECONDS - start)) s" >> "$OUT/run.log"
  # The kernel profile only where a whole one fits (`profile` runs it in a call of its own).
  (( SECONDS - start < deadline - 70 )) \
    && kernel_profile "$precision" $(( deadline - (SECONDS - start) - 10 ))
  (( SECONDS - start < deadline - 45 )) && finetune_syncs $(( deadline - 45 - (SECONDS - start) ))
  # What time is left measures the shapes the GPU-speed work is judged on (a round of base
  # takes up to ~80 s: four processes, each loading torch or the model and warming up), and
  # tiny at batch 32: the shape of the first GPU comparison (2.1x transformers' step time), where
  # the host's cost per op sets the pace (benches/host_overhead.sh measures that on a CPU).
  for shape in "tiny 256 128" "tiny 32 128" "base 128 128" "base 32 512" "tiny 256 128"; do
    (( SECONDS - start < deadline - 90 )) || break
    # shellcheck disable=SC2086
    bench_round $shape more
  done
}

# The experiment on the GPU within $5 seconds: mask, pretraining of $1 steps of batch $3 in
# precision $2 at learning rate $4, each task's fine-tuning learning rate chosen on dev
# (`choose_learning_rates`), the fine-tuning grid at those rates and the report; what it
# published and measured is collected.
experiment() {
  local steps="$1" precision="$2" batch="$3" lr="$4" left="$5" start=$SECONDS
  # The commit is quoted: --set reads YAML, where a short hash such as 75e4600 is a number (the
  # 2026-11-29 sitting's report said "Commit `7.5e+47`").
  local sets=(--set "device=${DEVICE:-cuda:0}" --set "commit='${COMMIT:-}'"
    --set "pretrain_steps=$steps" --set "pretrain.precision=$precision"
    --set "pretrain_batch_size=$batch" --set "pretrain_learning_rate=$lr"
    --set "pretrain_save_steps=[$(( steps / 10 )),$(( steps / 3 ))]"
    --set "pretrain.eval_interval=$(( steps / 10 ))")
  local rates=()
  if [[ -n "$(lr_grid)" ]]; then
    # shellcheck disable=SC2207 # the sets are words on purpose
    rates=($(choose_learning_rates "$left" "${sets[@]}" || true))
  fi
  # fp32 matmuls on TF32 tensor cores for the sitting (not for the fp32 bench rows, which are
  # measured both ways).
  # shellcheck disable=SC2046
  (cd "$WS" && TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout --signal=INT --kill-after=20 \
    "$(( left - (SECONDS - start) > 1 ? left - (SECONDS - start) : 1 ))" "$ROOT/pipeline" \
    run report --jobs 12 --gpus 12 $(scale_sets) "${sets[@]}" "${rates[@]}" \
    >> "$OUT/run.log" 2>&1) \
    || echo "run: exit $? after $((SECONDS - start)) s of the experiment" >> "$OUT/run.log"
  (cd "$WS" && collect)
}

# The fine-tuning learning rates tried on dev (`choose_learning_rates`): LR_GRID, by default
# the sitting's rate and two higher ones; LR_GRID= (empty) fine-tunes every task at
# scale_sets' rate alone, as the sittings of 2026-11-30 did.
lr_grid() {
  echo "${LR_GRID-2.0e-4 5.0e-4 1.0e-3}"
}

# Each task's fine-tuning learning rate, chosen on its dev split: the seed-1 pretrained run of
# each of the five tasks at each rate of `lr_grid`, the rate with the best dev score (accuracy,
# or MSRA NER's entity F1; a tie goes to the lower rate) kept for both inits, every seed and
# the curve. The first rate's call runs `mask` and the pretraining too; a later rate is
# skipped unless GRID_KEEP_S (140 s: the grid less its cached seed-1 runs, ~115 s estimated,
# the report and a margin) would still be left after it (~25 s): with REST_S at 270 s, ~205 s
# are left after the first rate's call (mask ~5 s, the runs ~25 s, and the pretraining's
# overrun of its plan, ~5 s), enough for both others. A final call cut by the deadline would
# leave the sitting without its report: the margin is on that side. Prints the `--set`s for `run report` (none for a task without a finished run: it
# keeps scale_sets' rate); the table of dev scores goes to run.log.
# Why: the 2026-11-30 sittings fine-tuned at one rate (2e-4) chosen before any pretrained model
# existed, and ended underfit (seed 1's last-epoch train accuracy 0.57 on XNLI, 0.70 on
# SMP2020-EWECT, 0.71 on LCQMC/AFQMC); pretrained beat every baseline on 0 of 5 tasks. Test
# scores play no part: every run scores test, and only dev is read here. Cost: each rate is a
# call of its own (the store is one process's at a time) of five runs side by side, ~25 s
# estimated from the 2026-11-30 grid (the longest, LCQMC/AFQMC's ~640 steps); the chosen
# rate's seed-1 runs are the grid's own (cached), so about two rates' runs come on top.
choose_learning_rates() {
  local left="$1" start=$SECONDS rate stage first=1
  shift
  local tasks curves targets=()
  tasks=$(stages_named finetune_ | grep -v '_curve$')
  curves=$(stages_named finetune_ | grep '_curve$' || true)
  for stage in $tasks; do targets+=("$stage@init=pretrained,seed=1"); done
  for rate in $(lr_grid); do
    local remaining=$(( left - (SECONDS - start) ))
    if [[ -z "$first" ]] && (( remaining < ${GRID_KEEP_S:-140} + 25 )); then
      echo "fine-tuning learning rate $rate: skipped, ${remaining} s left" >> "$OUT/run.log"
      continue
    fi
    first=""
    local per_task=()
    for stage in $tasks; do per_task+=(--set "$stage.learning_rate=$rate"); done
    echo "fine-tuning learning rate $rate: ${targets[*]}" >> "$OUT/run.log"
    # shellcheck disable=SC2046
    (cd "$WS" && TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout --signal=INT --kill-after=20 \
      "$(( remaining > 1 ? remaining : 1 ))" "$ROOT/pipeline" run "${targets[@]}" --jobs 12 \
      --gpus 12 $(scale_sets) "$@" "${per_task[@]}" >> "$OUT/run.log" 2>&1) \
      || echo "run: exit $? at learning rate $rate" >> "$OUT/run.log"
  done
  # shellcheck disable=SC2086 # the stage names are words
  CURVES="$curves" python3 - "$WS/.pipeline/artifacts" "$OUT/run.log" $tasks <<'PY'
import glob, json, os, sys
artifacts, log, tasks = sys.argv[1], sys.argv[2], sys.argv[3:]
curves = set(os.environ["CURVES"].split())
def score(m):
    dev = m.get("dev") or {}
    entities = dev.get("entities")
    return entities["micro"]["f1"] if entities else dev.get("accuracy")
lines, sets = ["fine-tuning learning rate by dev score (seed 1, pretrained):"], []
for task in tasks:
    found = {}
    for path in glob.glob(os.path.join(artifacts, f"{task}@init=pretrained,seed=1", "*", "metrics.json")):
        m = json.load(open(path))
        if score(m) is not None:
            found[m["learning_rate"]] = score(m)
    if not found:
        lines.append(f"  {task}: no run finished: scale_sets' rate")
        continue
    best = max(sorted(found), key=lambda r: found[r])  # the first maximum: the lower rate
    lines.append(f"  {task}: " + ", ".join(f"{r:g} {found[r]:.4f}" for r in sorted(found))
                 + f" -> {best:g}")
    for stage in [task] + [c for c in (f"{task}_curve",) if c in curves]:
        sets += ["--set", f"{stage}.learning_rate={best!r}"]
with open(log, "a") as f:
    f.write("\n".join(lines) + "\n")
print(" ".join(sets))
PY
}

# One round of the throughput bench at a shape, ours and transformers' alternating on the same
# GPU: ours fp32, ours with TF32 matmuls and ours in bf16 mixed precision, then transformers fp32
# and under bf16 autocast (SDPA; eager attention as well in the rounds after the pretraining).
bench_round() {
  local model="$1" batch="$2" seq="$3" tag="$4" masked=$(( $3 * 15 / 100 ))
  local file="$OUT/bench.jsonl" dev="${DEVICE:-cuda:0}" hf="${HF_DEVICE:-cuda}"
  local steps=10 runs=3 variant precision tf32
  # Each round's lines carry its number: the report compares ours with transformers' of the
  # same round, and quotes the median of the rounds' ratios.
  BENCH_CALL=$(( ${BENCH_CALL:-0} + 1 ))
  if [[ -n "${SMALL:-}" ]]; then batch=4; seq=32; masked=4; steps=1; runs=1; fi
  # The first round also times each step's phases apart (forward, backward, optimiser, each
  # waited for): where the time goes when a step is slower than transformers'; and counts the
  # times a timed step made the host wait for the device (`cuda_syncs_per_step`, torch's sync
  # debug mode; 0 is the aim), which no CPU run can show for a copy.
  local phases=() variants=(fp32: fp32:1 bf16:) slim=""
  [[ "$tag" == first ]] && phases=(--phases --count-syncs)
  # The first round sizes the pretraining, and every second it takes is taken from it: only
  # ours in bf16 (the pretraining's precision in both 2026-11-30 sittings, 1.16x and 1.45x
  # TF32's tokens/s at `tiny` 256 x 128) and at twice the batch, ~20 s where the full round
  # (float32, TF32 and transformers' two) took ~60 s. TF32 too where bf16 gave no line, so
  # the plan has a rate. FIRST_ROUND=full: the whole round, as before.
  if [[ "$tag" == first && "${FIRST_ROUND:-slim}" == slim ]]; then
    variants=(bf16:) slim=1
  fi
  local lines
  lines=$(wc -l 2>/dev/null < "$file" || echo 0)
  # Ours in one variant, `precision:tf32` (fp32:1 is float32 on TF32 tensor cores).
  ours_line() {
    precision="${1%%:*}" tf32="${1##*:}"
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="${tf32:-0}" timeout 60 "$ROOT/pipeline" bench train \
      --model "$model" --batch "$batch" --seq "$seq" --masked "$masked" --steps "$steps" \
      --runs "$runs" --device "$dev" --precision "$precision" "${phases[@]}" --json \
      2>>"$OUT/bench.err" \
      | grep '^{' | tag_line "{\"round\":\"$tag\",\"call\":$BENCH_CALL,\"tf32\":${tf32:-0}${tf32:+,\"precision\":\"tf32\"}}" \
      >> "$file" || true
  }
  for variant in "${variants[@]}"; do
    ours_line "$variant"
  done
  if [[ -n "$slim" ]] && (( $(wc -l < "$file") == lines )); then
    ours_line fp32:1
  fi
  [[ "$tag" == first ]] && wide_round "$model" "$(( batch * 2 ))" "$seq" "$masked" "$steps" "$runs"
  [[ -n "$slim" ]] && return 0
  # Transformers' eager attention too in the later rounds (the report compares ours with the
  # faster of the two); the first round, which sizes the pretraining, keeps to SDPA.
  local attns="sdpa" attn dtype
  [[ "$tag" == more ]] && attns="sdpa eager"
  for dtype in fp32 bf16; do
    for attn in $attns; do
      timeout 90 python3 benches/hf_baseline.py train --config "$model" --batch "$batch" \
        --seq "$seq" --masked "$masked" --steps "$steps" --runs "$runs" --device "$hf" \
        --dtype "$dtype" --attn "$attn" 2>>"$OUT/bench.err" \
        | grep '^{' | tag_line "{\"round\":\"$tag\",\"call\":$BENCH_CALL}" >> "$file" || true
    done
  done
}

# Ours in bf16 at twice the first round's batch ($2), with its lines (round "first" too; no
# transformers' row of that batch, so no ratio): `pretrain_plan` takes the wider batch where it
# buys enough tokens/s. At `tiny`'s size a step's host work, not its arithmetic, sets the pace
# (the 2026-11-30 phases: the forward took longer than the backward in bf16), so a batch twice
# as wide may cost little more time a step.
wide_round() {
  local model="$1" batch="$2" seq="$3" masked="$4" steps="$5" runs="$6"
  timeout 60 "$ROOT/pipeline" bench train --model "$model" --batch "$batch" --seq "$seq" \
    --masked "$masked" --steps "$steps" --runs "$runs" --device "${DEVICE:-cuda:0}" \
    --precision bf16 --json 2>>"$OUT/bench.err" \
    | grep '^{' | tag_line "{\"round\":\"first\",\"call\":$BENCH_CALL,\"tf32\":0}" \
    >> "$OUT/bench.jsonl" || true
}

# The kernel profile alone, in a call of its own (the sitting's call leaves it the time only
# when the experiment ends early): `benches/gpu_sitting.sh profile` with OUT set, in bf16
# unless PROFILE_PRECISION says, within PROFILE_S seconds (120); then the same step's libtorch
# operators by call path (`bench train --count-ops`) into $OUT/ops.json: on CUDA, which the
# CPU's count cannot show, whether the bf16 products wrote float32 themselves (no
# activation-sized `aten::to` under them) and what the kernels' callers were.
profile() {
  : "${OUT:?set OUT}"
  [[ -x "$ROOT/pipeline" ]] || unpack
  torch_libs
  local precision="${PROFILE_PRECISION:-bf16}" model batch seq
  host_trace "$precision"
  kernel_profile "$precision" "${PROFILE_S:-120}"
  read -r model batch seq <<< "${PROFILE_SHAPE:-base 32 512}"
  if [[ -n "${SMALL:-}" ]]; then model=tiny; batch=4; seq=32; fi
  timeout 60 "$ROOT/pipeline" bench train --model "$model" --batch "$batch" --seq "$seq" \
    --masked $(( seq * 15 / 100 )) --steps 1 --runs 1 --device "${DEVICE:-cuda:0}" \
    --precision "$precision" --count-ops --json > "$OUT/ops.json" 2>> "$OUT/ops.err" \
    || echo "count-ops: exit $?" >> "$OUT/ops.err"
}

# Where a step's host time goes at `tiny` 256 x 128 in precision $1, from torch's own profiler
# (`bench train --trace`: every operator's span on the host and every kernel's on the device;
# nsys is not on the GPU machine): the trace into $OUT/trace.json.gz, and what
# benches/trace_summary.py reads in it (host time in operators and between them, the device's
# busy time, range by range) into $OUT/trace.txt with the bench's own line (`--phases`: each
# phase's host time beside its whole). The 2026-11-30 sittings timed that shape's forward at
# 13-14 ms in fp32, TF32 and bf16 alike, against a 2.4 ms bf16 backward: this says whether the
# host's queueing sets that pace, and where. ~15 s; a failure is written down and passed over.
host_trace() {
  local precision="$1" batch=256 seq=128 out="$OUT/trace.txt" trace="$OUT/trace.json"
  if [[ -n "${SMALL:-}" ]]; then batch=4; seq=32; fi
  echo "host trace: tiny $batch x $seq $precision" > "$out"
  # One data-parallel worker (a GPU's anyway; on a CPU the dry run's): torch's profiler
  # follows the calling thread.
  local rc=0
  RAYON_NUM_THREADS=1 timeout 90 "$ROOT/pipeline" bench train --model tiny --batch "$batch" \
    --seq "$seq" --masked $(( seq * 15 / 100 )) --steps 5 --runs 1 --device "${DEVICE:-cuda:0}" \
    --precision "$precision" --phases --trace "$trace" >> "$out" 2>&1 || rc=$?
  if (( rc != 0 )); then
    echo "trace: exit $rc" >> "$out"
    rm -f "$trace"
    return 0
  fi
  python3 benches/trace_summary.py "$trace" >> "$out" 2>&1 || echo "summary: exit $?" >> "$out"
  gzip -f "$trace"
  returnable "$trace.gz" "$out" || true
}

# Whether file $1 fits the 16 MiB a file of $OUT may have to come back from the device tool;
# where it does not, it is removed and a line in $2 says so (status 1).
returnable() {
  local size
  size=$(stat -c %s "$1")
  if (( size >= 16 * 1024 * 1024 )); then
    rm -f "$1"
    echo "$(basename "$1"): $size bytes, over the 16 MiB a file may come back: left out" >> "$2"
    return 1
  fi
}

# Where a step's device time goes, kernel by kernel, into $OUT/kernels.txt: Nsight Compute times
# every kernel of a short `bench train` (PROFILE_SHAPE, "model batch seq": `base` 32 x 512 by
# default, the shape of the MFU target; the 2026-11-30 sitting profiled `tiny` 256 x 128), in
# precision $1, within at most $2 seconds (PROFILE_S, 120, when less), and
# benches/kernel_summary.py sums them by name, the heaviest first. Only the one timed step's
# kernels (and its loss read-back's): the bench opens a profiler range around its timed runs
# (`--cuda-profiler-range`) after two warm-up steps, and ncu records from its start
# (`--profile-from-start off`); the 2026-11-30 profile held model building and a warm-up step
# too. ncu reads
# the counters on the H200's Firecracker runtime (the device tool's KINDS.md, seen 2026-11-04);
# nsys is not there. Where ncu is missing or fails, the file says so and the sitting goes on.
kernel_profile() {
  local precision="$1" left="$2" out="$OUT/kernels.txt" csv="$ROOT/kernels.csv" ncu
  local model batch seq masked limit="${PROFILE_S:-120}"
  read -r model batch seq <<< "${PROFILE_SHAPE:-base 32 512}"
  masked=$(( seq * 15 / 100 ))
  if [[ -n "${SMALL:-}" ]]; then model=tiny; batch=4; seq=32; masked=4; fi
  (( left < limit )) && limit=$left
  if (( limit < 20 )); then
    echo "kernel profile: skipped, ${left} s left before the deadline" | tee "$out"
    return 0
  fi
  ncu="$(command -v ncu || find /opt/nvidia /usr/local/cuda*/ -name ncu -type f 2>/dev/null \
    | head -n 1 || true)"
  if [[ -z "$ncu" ]]; then
    echo "kernel profile: no ncu on this machine" | tee "$out"
    return 0
  fi
  echo "kernel profile: $ncu, $model $batch x $seq $precision" > "$out"
  local t0=$SECONDS
  # --cache-control none and one metric: one pass a kernel, no cache flush between them.
  timeout "$limit" "$ncu" --clock-control none --cache-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --print-units base --csv \
    --launch-count "${PROFILE_KERNELS:-4000}" \
    "$ROOT/pipeline" bench train --model "$model" --batch "$batch" --seq "$seq" --masked "$masked" \
    --steps 1 --runs 1 --warmup 2 --cuda-profiler-range --device "${DEVICE:-cuda:0}" \
    --precision "$precision" \
    > "$csv" 2> "$csv.err" || echo "ncu: exit $? (limit $limit s)" >> "$csv.err"
  echo "($((SECONDS - t0)) s under ncu; the kernels of one timed step and its read-back)" >> "$out"
  python3 benches/kernel_summary.py "$csv" >> "$out" 2>&1 || true
  tail -n 15 "$csv.err" >> "$out"
}

# Whether a fine-tuning step waits for the device, which the pretraining's count does not cover:
# `bench finetune --count-syncs` (both heads, `tiny` at the grid's batch, float32 on TF32 tensor
# cores as the grid ran it), one line into bench.jsonl (the report's throughput table skips
# its kind) and the first sync's call stack, if any, with it. Then the same in bf16, where
# $1 seconds are left: whether the grid, which runs on TF32, would be faster in it (`tiny`'s
# bf16 pretraining step was 0.92x float32's at batch 32 and 1.2-1.5x TF32's at 256).
finetune_syncs() {
  local batch=128 seq=128 until=$(( SECONDS + $1 )) precision
  if [[ -n "${SMALL:-}" ]]; then batch=4; seq=32; fi
  for precision in fp32 bf16; do
    [[ $precision == fp32 ]] || (( until - SECONDS >= 40 )) || break
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout 40 "$ROOT/pipeline" bench finetune --model tiny \
      --batch "$batch" --seq "$seq" --steps 3 --runs 1 --warmup 1 --device "${DEVICE:-cuda:0}" \
      --precision "$precision" --count-syncs --json 2>>"$OUT/bench.err" \
      | grep '^{' | tag_line "{\"round\":\"syncs\",\"tf32\":1,\"precision\":\"$precision\"}" \
      >> "$OUT/bench.jsonl" || true
  done
}

# Adds the keys of the JSON object $1 to each JSON line of stdin.
tag_line() {
  python3 -c 'import json, sys
extra = json.loads(sys.argv[1])
for line in sys.stdin:
    print(json.dumps({**json.loads(line), **extra}))' "$1"
}

# The pretraining's steps, precision, batch and learning rate, from the first bench round, for
# $1 seconds of pretraining. Precision: bf16 where it ran and is at least 10 % faster than
# float32 on TF32 tensor cores (PRETRAIN_PRECISION=fp32|bf16 decides instead). Batch:
# PRETRAIN_BATCH rows, or twice that in bf16 where `wide_round` measured it at least 20 % more
# tokens/s (PRETRAIN_WIDE=0: never). Learning rate: 8e-3 at 256 rows, by the square root of the
# batch ratio (the rule results/pretraining-recipe.md takes from the LAMB paper). Steps: as
# many as ($1 - 10) seconds take at that rate (the 2026-11-30 sitting's pretraining ran at the
# bench's rate: 15,400 steps of 256 x 128 in 274.5 s against 271 s planned, evaluations and
# checkpoints included). bf16 follows float32's loss curve (stages/pretrain's 200-step test).
# 0 steps where they would see fewer than MIN_TOKENS tokens: the 2026-11-29 sitting's 28.8 M
# ended at the no-context floor, and published curves leave it after 10^8 or more.
pretrain_plan() {
  python3 - "$OUT/bench.jsonl" "$1" "${PRETRAIN_BATCH:-256}" "${SMALL:-}" \
    "${PRETRAIN_PRECISION:-auto}" "${MIN_TOKENS:-1e8}" "${PRETRAIN_WIDE:-1}" <<'EOF'
import json, math, sys
path, seconds, batch, small, choice, least, wide = sys.argv[1:8]
seconds, batch, least = float(seconds), int(batch), float(least)
if small:
    batch = 8  # scale_sets' SMALL pretraining batch
first = [r for r in map(json.loads, open(path))
         if r.get("bench") == "train" and r.get("round") == "first" and "tokens_per_s" in r]
def rate(precision, rows):
    return next((r["tokens_per_s"] for r in first
                 if r.get("precision") == precision and r.get("batch") == rows), None)
# A dry run (SMALL) benches batch 4, not the pretraining's.
bench_rows = 4 if small else batch
base = {p: rate(p, bench_rows) for p in ("tf32", "bf16")}
if choice == "auto":
    faster = base["bf16"] and (not base["tf32"] or base["bf16"] >= 1.1 * base["tf32"])
    choice = "bf16" if faster else "fp32"
used = base["bf16"] if choice == "bf16" else base["tf32"]
wider = rate("bf16", 2 * bench_rows)
if wide == "1" and choice == "bf16" and used and wider and wider >= 1.2 * used:
    batch, used = 2 * batch, wider
lr = float(f"{8e-3 * math.sqrt(batch / 256):.2g}")
if small:
    steps = 40
elif not used:
    steps = 6000  # ~1 M tokens/s: the bench failed, so a guess on the safe side
elif (seconds - 10) * used < least:
    steps = 0
else:
    steps = max(1000, int((seconds - 10) * used / (batch * 128)) // 100 * 100)
print(steps, choice, batch, lr)
EOF
}

# What the sitting published and measured: the published directory (results.tgz), and in
# store.tgz the run summary, `exp show --json` and every stage's metrics, manifest and logs
# (small files), in one tarball because the device tool brings back at most 8 files, and no
# file whose name holds `@`, `,` or `=`, which every matrix instance's directory does. (`-size
# -2M` is "at most 1 MiB": find rounds sizes up to whole units, so `-1M` would keep only empty
# files.)
collect() {
  if [ -d results ]; then tar -czf "$OUT/results.tgz" results; fi
  mkdir -p .sitting
  "$ROOT/pipeline" runs > .sitting/runs.txt 2>&1 || true
  "$ROOT/pipeline" exp show --json > .sitting/exp.json 2>>"$OUT/run.log" || true
  { echo .sitting/runs.txt; echo .sitting/exp.json
    find .pipeline/artifacts .pipeline/failed -type f -size -2M \
      \( -name 'metrics.json' -o -name 'metrics.jsonl' -o -name 'MANIFEST.json' -o -name '*.log' \) \
      2>/dev/null; } | tar -czf "$OUT/store.tgz" -T - || true
  pretrained_model
}

# The final pretrained model (`pretrain`'s config.json, model.safetensors, vocab.txt and
# tokenizer.json: a Hugging Face `AlbertForPreTraining` directory, with the tokenizer that
# `init_from` reads beside it) as $OUT/pretrained.tgz, the eighth file the device tool brings
# back, where it fits its 16 MiB (`tiny` in float32: ~15.4 MB). `.pipeline/` does not travel,
# so without it no session after the sitting can fine-tune that model again: with it, a CPU
# session tunes the fine-tuning recipe on the dev splits (benches/recipe/finetune_grid.yaml)
# before the next sitting. gzip, not xz: float32 weights hardly compress either way (4.14 M
# normal floats: 15.37 MB as gzip in 0.6 s, 15.24 MB as xz in 9.3 s, here), and collect has
# the 30 s the experiment's timeout leaves it.
pretrained_model() {
  local dir
  dir="$(find .pipeline/artifacts/pretrain -mindepth 2 -maxdepth 2 -name model.safetensors \
    -printf '%h\n' 2>/dev/null | head -n 1)"
  [[ -n "$dir" ]] || { echo "pretrained.tgz: no pretrain artifact" >> "$OUT/run.log"; return 0; }
  tar -C "$dir" --transform 's,^,pretrained/,' -czf "$OUT/pretrained.tgz" \
    config.json model.safetensors vocab.txt tokenizer.json 2>> "$OUT/run.log" \
    || { rm -f "$OUT/pretrained.tgz"; return 0; }
  if returnable "$OUT/pretrained.tgz" "$OUT/run.log"; then
    echo "pretrained.tgz: $(stat -c %s "$OUT/pretrained.tgz") bytes from $dir" >> "$OUT/run.log"
  fi
}

"${1:?prepare, run, stage, evidence or profile}" "${@:2}"
