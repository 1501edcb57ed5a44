#!/usr/bin/env bash
# One sitting of a pipeline file (ablations.yaml by default) on a lent GPU, in one call: the tch
# build and the data it reads travel in .gpu/ (git-ignored), the store stays on the GPU machine
# (it does not travel), and what the sitting published and measured comes back under $OUT.
#
#   benches/gpu_sitting.sh prepare                    # here: strip the tch binary, pack binary + data
#   FILE=ablations.yaml TARGET=report COMMIT=abc1234 \
#     DEADLINE=480 benches/gpu_sitting.sh run         # there: the sitting, stopped at the deadline
#
# A fresh GPU machine has no Rust toolchain and no network; PyTorch 2.11 (cu130) is in its
# python3, and the tch binary loads that libtorch (../shared/docs/GPU.md). Stages with
# `resources: {gpu: 1}` share the one GPU (`--gpus`), the machine's 16 cores run them at once.
set -euo pipefail
cd "$(dirname "$0")/.."

prepare() {
  local bin="${BIN:-target/tch/release/pipeline}" data="${DATA:-../shared/datasets}"
  rm -rf .gpu && mkdir -p .gpu
  strip -o .gpu/pipeline "$bin"
  gzip -9 .gpu/pipeline
  # Everything the experiment files read: the general corpus, the eight tasks (fine-tuning and
  # decontamination) and the vocabulary. The ChnSentiCorp reviews file (every test text) is
  # left out of the corpus by the files' inputs anyway, so it does not travel.
  tar -C "$data" --exclude=corpus/misc/chnsenticorp_reviews.txt -czf .gpu/data.tar.gz \
    corpus vocab chnsenticorp smp2020_ewect msra_ner lcqmc afqmc nli_extra xnli_zh \
    cmrc2018/dev.json c3/dev.json
  du -sh .gpu/*
}

run() {
  : "${OUT:?set OUT}"
  local file="${FILE:-ablations.yaml}" target="${TARGET:-report}" deadline="${DEADLINE:-480}"
  local ws=/tmp/gpu/ws bin=/tmp/gpu/pipeline
  rm -rf /tmp/gpu && mkdir -p /tmp/gpu/data "$ws"
  tar -C /tmp/gpu/data -xzf .gpu/data.tar.gz
  gunzip -c .gpu/pipeline.gz > "$bin" && chmod +x "$bin"
  export LD_LIBRARY_PATH="$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
  { nvidia-smi -L || true; nproc; } > "$OUT/gpu.txt"
  cp "$file" "$ws/pipeline.yaml"
  cd "$ws"
  local start=$SECONDS
  timeout --signal=INT --kill-after=20 "$deadline" "$bin" run "$target" --jobs 12 --gpus 12 \
    --set data=/tmp/gpu/data --set "device=${DEVICE:-cuda:0}" --set "commit=${COMMIT:-}" ${EXTRA:-} \
    > "$OUT/run.log" 2>&1 || echo "run: exit $? after $((SECONDS - start)) s" >> "$OUT/run.log"
  echo "sitting: $((SECONDS - start)) s" >> "$OUT/run.log"
  collect
}

# What the sitting published and measured: the published directory, the run summary, and every
# stage's metrics, manifest and logs (small files) in one tarball: the device tool brings back no
# file whose name holds `@`, `,` or `=`, which every matrix instance's directory does. (`-size
# -2M` is "at most 1 MiB": find rounds sizes up to whole units, so `-1M` would keep only empty
# files.)
collect() {
  if [ -d results ]; then tar -czf "$OUT/results.tgz" results; fi
  "$bin" runs > "$OUT/runs.txt" 2>&1 || true
  "$bin" exp show --json > "$OUT/exp.json" 2>>"$OUT/run.log" || true
  find .pipeline/artifacts .pipeline/failed -type f -size -2M \
    \( -name 'metrics.json' -o -name 'MANIFEST.json' -o -name '*.log' \) 2>/dev/null \
    | tar -czf "$OUT/store.tgz" -T - || true
}

"${1:?prepare or run}"
