#!/usr/bin/env bash
# The recipe pilots (benches/recipe/pilots.yaml) on a lent GPU, in one call: the tch build and
# the data it reads travel in .gpu/ (see `prepare` below; .gpu/ is git-ignored), everything
# the call measured comes back under $OUT.
#
#   benches/recipe/gpu.sh prepare            # here: strip the tch binary, pack binary + data
#   benches/recipe/gpu.sh run                # there: unpack, bench, pilots until the deadline
#
# A fresh GPU machine has no Rust toolchain and no network; PyTorch 2.11 (cu130) is in its
# python3, and the tch binary loads that libtorch (../shared/docs/GPU.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEADLINE="${DEADLINE:-420}"   # seconds the pilots may run before what finished is collected

prepare() {
  local bin="${BIN:-target/tch/release/pipeline}" data="${DATA:-../shared/datasets}"
  rm -rf .gpu && mkdir -p .gpu
  strip -o .gpu/pipeline "$bin"
  # The pilots read the general corpus, the two probe tasks and the vocabulary; the ChnSentiCorp
  # reviews file (every test text) is left out of the corpus by the pilots' inputs anyway.
  tar -C "$data" --exclude=corpus/misc/chnsenticorp_reviews.txt -czf .gpu/data.tar.gz \
    corpus chnsenticorp afqmc lcqmc vocab
  gzip -9 .gpu/pipeline
  du -sh .gpu/*
}

run() {
  : "${OUT:?set OUT}"
  mkdir -p /tmp/gpu/data
  tar -C /tmp/gpu/data -xzf .gpu/data.tar.gz
  gunzip -c .gpu/pipeline.gz > /tmp/gpu/pipeline && chmod +x /tmp/gpu/pipeline
  local bin=/tmp/gpu/pipeline
  export LD_LIBRARY_PATH="$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
  nvidia-smi -L | tee "$OUT/gpu.txt"
  # Throughput, ours and transformers' on the same GPU in this call (tiny, batch 32 × 128, the
  # pilots' shape): two runs each, alternating.
  for round in 1 2; do
    "$bin" bench train --model tiny --batch 32 --seq 128 --masked 20 --steps 20 --runs 2 \
      --device cuda:0 --json 2>>"$OUT/bench.err" | grep '^{' >> "$OUT/bench.jsonl" || true
    python3 benches/hf_baseline.py train --config tiny --batch 32 --seq 128 --masked 20 \
      --steps 20 --runs 2 --device cuda 2>>"$OUT/bench.err" | grep '^{' >> "$OUT/bench.jsonl" || true
  done
  # The pilots: a workspace of their own, the data root unpacked above.
  mkdir -p /tmp/gpu/ws && cp benches/recipe/pilots.yaml /tmp/gpu/ws/pipeline.yaml
  cd /tmp/gpu/ws
  # The probes only: the mask matrix's fourth instance (task text at 25 %) feeds nothing.
  timeout --signal=TERM "$DEADLINE" "$bin" run probe_chnsenticorp probe_lcqmc_afqmc \
    random_chnsenticorp random_lcqmc_afqmc --jobs 12 --gpus 6 \
    --set data=/tmp/gpu/data --set device=cuda:0 > "$OUT/run.log" 2>&1 || echo "run: exit $?" >> "$OUT/run.log"
  "$bin" exp show --json > "$OUT/exp.json" 2>>"$OUT/run.log" || true
  "$bin" runs > "$OUT/runs.txt" 2>&1 || true
  # Every metrics file (small), by stage and instance.
  find .pipeline/artifacts -name 'metrics.json' | while read -r f; do
    d="$OUT/metrics/${f#.pipeline/artifacts/}"; mkdir -p "$(dirname "$d")"; cp "$f" "$d"
  done
  find .pipeline/artifacts -name 'MANIFEST.json' | while read -r f; do
    d="$OUT/manifests/${f#.pipeline/artifacts/}"; mkdir -p "$(dirname "$d")"; cp "$f" "$d"
  done
}

"${1:?prepare or run}"
