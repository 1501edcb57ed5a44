#!/usr/bin/env bash
# The load benchmark of `pipeline serve` against a transformers text-classification pipeline
# behind uvicorn/FastAPI (benches/serve_transformers.py) serving the same model, on the same
# cores, in the same run: for each workload both servers are started, pinned with taskset to
# the same cores, and measured in turn (ours, Python, ours, Python, …) for N rounds.
#
#   benches/serve.sh [--rounds N] [--dry-run] [--out FILE] [--cores LIST] [--concurrency C]
#                    [--duration S] [--servers serve,python] [--serve-args "FLAGS"]
#                    [--single DIR] [--pair DIR] [--autogroup-nice N]
#
# Workloads: `tiny` (albert_zh's shape) single-text classification of 64-character Chinese texts
# (ChnSentiCorp reviews) and sentence-pair classification of 32+32 characters (AFQMC pairs).
# Per server and round: wrk at a fixed concurrency (C, default 16) for S seconds (default 10)
# after a warm-up of 3 s gives requests/s, p50 and p99; then an open-loop load at half of that
# requests/s (benches/serve_load.py rate) for S seconds gives the p99 at half of the maximum.
# Each measurement is a JSON line, after one line of date, commit, machine and settings, in
# $WORK/run.jsonl while the run lasts; at the end the tables of this run, with the median over
# rounds of each per-round ratio ours / Python, are printed (benches/serve_load.py summary) and
# its lines are appended to FILE (default results/bench/serve.jsonl), which keeps every earlier
# run's.
#
# --dry-run: the whole harness once, quickly (1 round, 2 s per measurement, no warm-up), into
# $WORK/dry-run.jsonl: checks that the tools, models and both servers work; its numbers are not
# results.
#
# Builds nothing: it takes the release binary target/release/pipeline as it is (build it first
# with `cargo build --release`), the Python environment .venv-torch (scripts/setup-python.sh)
# with fastapi and uvicorn added (`.venv-torch/bin/pip install fastapi uvicorn`), and wrk
# (`apt-get install wrk`). The served models are fine-tuned once into $WORK (default
# ${TMPDIR:-/tmp}/serve-bench) by the binary's own finetune stage: a random-init tiny ALBERT
# (serve_transformers.py init-tiny) trained one epoch on 256 examples, which is enough for a
# benchmark (throughput does not depend on the weights); --single DIR / --pair DIR serve
# given model directories instead.
#
# `pipeline serve` runs with its defaults (dynamic batching up to 8192 tokens or 5 ms, one batch
# at a time) plus --serve-args. Each measurement records the CPU-seconds per wall-second the
# server used, so that a run that other processes crowded out shows itself. On a shared machine
# with the kernel's autogroup scheduling on (/proc/sys/kernel/sched_autogroup_enabled = 1),
# `nice` does not protect a benchmark from another session's compiler (docs/performance.md);
# --autogroup-nice -15 (root) raises this session's share of the CPU against other sessions'
# for the run. On a 2-core machine the load generator runs on the servers' cores too, equally
# for both servers.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=3
DRY_RUN=0
OUT=results/bench/serve.jsonl
CORES=0,1
CONCURRENCY=16
DURATION=10
WARMUP=3
SERVERS=serve,python
SINGLE=""
PAIR=""
SERVE_ARGS=""
AUTOGROUP_NICE=""
WORK="${SERVE_BENCH_WORK:-${TMPDIR:-/tmp}/serve-bench}"
BIN=target/release/pipeline
PY=.venv-torch/bin/python
DATA="${PIPELINE_DATA_ROOT:-$(cd .. && pwd)/shared/datasets}"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    --cores) CORES="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --servers) SERVERS="$2"; shift 2 ;;
    --single) SINGLE="$2"; shift 2 ;;
    --pair) PAIR="$2"; shift 2 ;;
    --serve-args) SERVE_ARGS="$2"; shift 2 ;;
    --autogroup-nice) AUTOGROUP_NICE="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "serve.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
if [[ $DRY_RUN == 1 ]]; then
  ROUNDS=1 DURATION=2 WARMUP=0 OUT="$WORK/dry-run.jsonl"
fi
NCORES=$(awk -F, '{print NF}' <<<"$CORES")

die() { echo "serve.sh: $*" >&2; exit 1; }
log() { echo "serve.sh: $*" >&2; }

check_tools() {
  command -v wrk >/dev/null || die "wrk is missing: apt-get install wrk"
  command -v taskset >/dev/null || die "taskset is missing (util-linux)"
  [[ -x $PY ]] || die "$PY is missing: scripts/setup-python.sh"
  $PY -c 'import fastapi, uvicorn' 2>/dev/null \
    || die "fastapi/uvicorn missing: .venv-torch/bin/pip install fastapi uvicorn"
  if [[ $SERVERS == *serve* || -z $SINGLE || -z $PAIR ]]; then
    [[ -x $BIN ]] || die "$BIN is missing: cargo build --release (this script builds nothing)"
  fi
  [[ -d $DATA ]] || die "no shared data at $DATA (set PIPELINE_DATA_ROOT)"
}

# The two fine-tuned models, made once into $WORK/models by the binary's finetune stage.
prepare_models() {
  if [[ -n $SINGLE && -n $PAIR ]]; then return; fi
  local models="$WORK/models"
  if [[ ! -f $models/single/config.json || ! -f $models/pair/config.json ]]; then
    log "fine-tuning the served models into $models (once; about a minute)"
    rm -rf "$WORK/tiny-init" "$WORK/ws" "$models"
    mkdir -p "$WORK/ws" "$models"
    $PY benches/serve_transformers.py init-tiny "$WORK/tiny-init" --vocab "$DATA/vocab/vocab.txt"
    write_models_yaml > "$WORK/ws/pipeline.yaml"
    "$BIN" -f "$WORK/ws/pipeline.yaml" run --json -q > "$WORK/ws/run.json"
    for m in single pair; do
      cp -r "$($PY -c "import json,sys; print(next(s['artifact'] for s in json.load(open(sys.argv[1]))['stages'] if s['stage'] == sys.argv[2]))" "$WORK/ws/run.json" "$m")" "$models/$m"
    done
  fi
  SINGLE="${SINGLE:-$models/single}"
  PAIR="${PAIR:-$models/pair}"
}

write_models_yaml() {
  cat <<EOF
# Written by benches/serve.sh: the models its load benchmark serves.
vars:
  data: $DATA
stages:
  single:
    kind: finetune
    inputs: ["\${vars.data}/chnsenticorp/train.tsv", "\${vars.data}/chnsenticorp/dev.tsv"]
    params: {init_from: $WORK/tiny-init, task: chnsenticorp, train: "\${vars.data}/chnsenticorp/train.tsv",
             dev: "\${vars.data}/chnsenticorp/dev.tsv", max_train_examples: 256, max_eval_examples: 64,
             epochs: 1, max_seq_length: 128}
  pair:
    kind: finetune
    inputs: ["\${vars.data}/lcqmc/dev.tsv"]
    params: {init_from: $WORK/tiny-init, task: lcqmc, train: "\${vars.data}/lcqmc/dev.tsv",
             dev_fraction: 0.1, max_train_examples: 256, max_eval_examples: 64, epochs: 1,
             max_seq_length: 128}
EOF
}

# Servers started here, stopped on any exit (SIGTERM, then SIGKILL after 10 s).
PIDS=()
stop_servers() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
# The autogroup's nice is the session's, not this script's: put it back on exit.
AUTOGROUP_BEFORE=""
restore_autogroup() {
  if [[ -n $AUTOGROUP_BEFORE ]]; then echo "$AUTOGROUP_BEFORE" > "/proc/$$/autogroup" || true; fi
}
trap 'stop_servers; restore_autogroup' EXIT
trap 'exit 130' INT TERM

# start_server NAME CMD...: starts CMD pinned to $CORES; sets URL from its first stdout line
# (both servers print their bound address there with port 0) and PID.
start_server() {
  local name="$1"; shift
  local log="$WORK/$name"
  taskset -c "$CORES" "$@" > "$log.out" 2> "$log.err" &
  PID=$!
  PIDS+=("$PID")
  URL=""
  for _ in $(seq 600); do
    kill -0 "$PID" 2>/dev/null || die "$name exited at start: $(tail -5 "$log.err")"
    URL=$(head -1 "$log.out" | grep -oE '[0-9.]+:[0-9]+' | head -1 || true)
    [[ -n $URL ]] && break
    sleep 0.2
  done
  [[ -n $URL ]] || die "$name printed no address in 120 s ($log.err)"
  URL="http://$URL"
  curl -sf "$URL/health" > /dev/null || die "$name: $URL/health does not answer"
  log "$name: $URL (pid $PID)"
}

start_workload_servers() {
  local kind="$1" model="$2"
  SERVE_URL="" PY_URL=""
  if [[ $SERVERS == *serve* ]]; then
    # --port 0: a free port, printed on the first stdout line.
    # shellcheck disable=SC2086 # SERVE_ARGS: flags, split on spaces
    start_server "serve-$kind" "$BIN" serve --model "$model" --port 0 $SERVE_ARGS
    SERVE_URL=$URL SERVE_PID=$PID
  fi
  if [[ $SERVERS == *python* ]]; then
    # One inference thread per core, one torch thread each: what measured best for it (see
    # serve_transformers.py).
    start_server "python-$kind" $PY benches/serve_transformers.py serve --model "$model" \
      --port 0 --infer-threads "$NCORES" --threads 1
    PY_URL=$URL PY_PID=$PID
  fi
  if [[ -n $SERVE_URL && -n $PY_URL ]]; then
    python3 benches/serve_load.py check "$SERVE_URL" "$PY_URL" --bodies "$WORK/$kind.jsonl"
  fi
}

# cpu_ticks PID: the CPU time the process (all its threads) has used, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure KIND SERVER URL PID ROUND: one JSON line into $RUN.
measure() {
  local kind="$1" server="$2" url="$3" pid="$4" round="$5" closed rate open rss t0 c0 cpu
  export SERVE_BENCH_BODIES="$WORK/$kind.jsonl"
  if [[ $WARMUP -gt 0 ]]; then
    wrk -t1 -c"$CONCURRENCY" -d"${WARMUP}s" --timeout 30s -s benches/serve_wrk.lua "$url" > /dev/null
  fi
  t0=$(date +%s.%N) c0=$(cpu_ticks "$pid")
  closed=$(wrk -t1 -c"$CONCURRENCY" -d"${DURATION}s" --timeout 30s -s benches/serve_wrk.lua "$url" | grep '^{')
  cpu=$(awk -v c0="$c0" -v c1="$(cpu_ticks "$pid")" -v t0="$t0" -v t1="$(date +%s.%N)" \
    -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (c1 - c0) / hz / (t1 - t0)}')
  rate=$(python3 -c 'import json,sys; print(max(1.0, json.loads(sys.argv[1])["rps"] / 2))' "$closed")
  open=$(python3 benches/serve_load.py rate "$url" --bodies "$SERVE_BENCH_BODIES" --rate "$rate" \
    --duration "$DURATION" --connections 64)
  rss=$(awk '/VmHWM/ {print $2 / 1024}' "/proc/$pid/status")
  python3 - "$closed" "$open" "$kind" "$server" "$round" "$rss" "$cpu" >> "$RUN" <<'EOF'
import json, sys
closed, open_loop = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({
    "type": "run", "workload": sys.argv[3], "server": sys.argv[4], "round": int(sys.argv[5]),
    **closed, "cpu_s_per_wall_s": float(sys.argv[7]),
    "rate": open_loop["rate"], "rate_achieved_rps": open_loop["achieved_rps"],
    "rate_p50_ms": open_loop["p50_ms"], "rate_p99_ms": open_loop["p99_ms"],
    "rate_errors": open_loop["errors"], "rss_mb": round(float(sys.argv[6]), 1),
}))
EOF
  tail -1 "$RUN" >&2
}

write_meta() {
  local commit dirty=""
  commit=$(git rev-parse --short HEAD)
  # The binary records no commit: HEAD, marked when the checkout's sources differ from it, and
  # the binary's build time.
  git diff --quiet HEAD -- crates stages Cargo.lock Cargo.toml 2>/dev/null || dirty="+dirty"
  python3 - >> "$RUN" <<EOF
import json, platform
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(json.dumps({
    "type": "meta", "date": "$(date -u +%Y-%m-%dT%H:%MZ)", "commit": "$commit$dirty",
    "binary_built": "$(date -u -r "$BIN" +%Y-%m-%dT%H:%MZ 2>/dev/null || echo none)",
    "machine": f"{cpu}, $(nproc) cores online, servers pinned to cores $CORES",
    "kernel": platform.release(), "concurrency": $CONCURRENCY, "duration_s": $DURATION,
    "warmup_s": $WARMUP, "rounds": $ROUNDS, "wrk": "$(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)",
    "python": "$($PY -c 'import torch, transformers, fastapi, uvicorn; print(f"torch {torch.__version__}, transformers {transformers.__version__}, fastapi {fastapi.__version__}, uvicorn {uvicorn.__version__}")')",
    "models": {"single": "${SINGLE/#"$WORK"/\$WORK}", "pair": "${PAIR/#"$WORK"/\$WORK}"}, "serve_args": "$SERVE_ARGS",
    "autogroup_nice": "$AUTOGROUP_NICE", "load_average": open("/proc/loadavg").read().split()[:3],
}))
EOF
}

main() {
  check_tools
  if [[ -n $AUTOGROUP_NICE ]]; then
    AUTOGROUP_BEFORE=$(awk '{print $NF}' "/proc/$$/autogroup")
    echo "$AUTOGROUP_NICE" > "/proc/$$/autogroup" || die "cannot set the autogroup's nice (root?)"
    log "this session's autogroup: $(cat "/proc/$$/autogroup")"
  fi
  mkdir -p "$WORK" "$(dirname "$OUT")"
  if [[ $DRY_RUN == 1 ]]; then : > "$OUT"; fi # a dry run's lines are not results: the last only
  python3 benches/serve_load.py bodies --kind single --data "$DATA" --out "$WORK/single.jsonl"
  python3 benches/serve_load.py bodies --kind pair --data "$DATA" --out "$WORK/pair.jsonl"
  prepare_models
  # This run's lines, kept apart until it ends: a run that fails half-way adds nothing to
  # $OUT, and the summary reads this run alone.
  RUN="$WORK/run.jsonl"
  : > "$RUN"
  write_meta
  local kind model round
  for kind in single pair; do
    model=$SINGLE; [[ $kind == pair ]] && model=$PAIR
    start_workload_servers "$kind" "$model"
    for round in $(seq "$ROUNDS"); do
      log "$kind, round $round of $ROUNDS"
      [[ -n $SERVE_URL ]] && measure "$kind" serve "$SERVE_URL" "$SERVE_PID" "$round"
      [[ -n $PY_URL ]] && measure "$kind" python "$PY_URL" "$PY_PID" "$round"
    done
    stop_servers
  done
  python3 benches/serve_load.py summary "$RUN"
  cat "$RUN" >> "$OUT"
  log "appended this run's $(wc -l < "$RUN") lines to $OUT"
}

main
