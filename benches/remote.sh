#!/usr/bin/env bash
# Remote store throughput: push and pull of a 1 GB artifact to a directory remote and
# to moto's S3 server on 127.0.0.1, each against `cp` of the same file in the same run
# (alternating push, cp, pull, cp round by round; the figure is the median of per-round
# ratios), and a push of 1,000 artifacts that the remote already has (one listing: ≤ 1 s).
#
#   benches/remote.sh [BIN [BASE]]  # BIN: target/debug/pipeline by default (dependencies,
#                                   # where the bytes are hashed and moved, are optimised in
#                                   # dev builds); BASE: a binary to compare with, measured in
#                                   # the same rounds (which of the two goes first alternates)
#
# ROUNDS (3), SIZE_MB (1000) and N_ARTIFACTS (1000) change the sizes; WORK the scratch folder
# (it needs 4 × SIZE_MB of disk, 5 × with BASE). Prints one JSON object a line; the last lines
# are summaries.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${1:-target/debug/pipeline}")"
BASE="${2:+$(realpath "$2")}"
ROUNDS="${ROUNDS:-3}"
SIZE_MB="${SIZE_MB:-1000}"
N="${N_ARTIFACTS:-1000}"
WORK="$(mktemp -d "${WORK:-/tmp}/remote-bench.XXXXXX")"
MOTO_PID=""
cleanup() {
    [ -n "$MOTO_PID" ] && kill "$MOTO_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
unset PIPELINE_REMOTE
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo -dirty)"
now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }
# The median of per-round ratios A/B (below 1: faster than cp).
median() { python3 -c "import sys, statistics as s; print(f'{s.median(float(x) for x in sys.argv[1:]):.3f}')" "$@"; }
ratio() { python3 -c "import sys; print(float(sys.argv[1]) / float(sys.argv[2]))" "$1" "$2"; }

# One 1 GB artifact (random bytes: nothing to gain from compression or deduplication), made
# by each binary in its own workspace `a-bin`, `a-base` (two builds may give the stage other
# fingerprints); `b` is where it is pulled to.
mkdir -p "$WORK/b"
cat > "$WORK/b/pipeline.yaml" <<EOF
stages:
  model:
    cmd: "head -c ${SIZE_MB}000000 /dev/urandom > \$PIPELINE_OUT/model.bin"
EOF
for which in bin ${BASE:+base}; do
    mkdir -p "$WORK/a-$which"
    cp "$WORK/b/pipeline.yaml" "$WORK/a-$which/pipeline.yaml"
    bin="$BIN"; [ "$which" = base ] && bin="$BASE"
    "$bin" -q -f "$WORK/a-$which/pipeline.yaml" run
done
FILE="$(ls -d "$WORK"/a-bin/.pipeline/artifacts/model/*)/model.bin"

# round WHICH BIN REMOTE: one round of push / cp / pull / cp with BIN; prints the four times.
round() {
    local which="$1" bin="$2" remote="$3" t0 t1 push cp1 pull cp2
    t0=$(now); "$bin" -q -f "$WORK/a-$which/pipeline.yaml" push --remote "$remote"; t1=$(now)
    push=$(secs "$t0" "$t1")
    t0=$(now); cp "$FILE" "$WORK/cp.bin"; t1=$(now); cp1=$(secs "$t0" "$t1"); rm -f "$WORK/cp.bin"
    rm -rf "$WORK/b/.pipeline"
    t0=$(now); "$bin" -q -f "$WORK/b/pipeline.yaml" pull --remote "$remote"; t1=$(now)
    pull=$(secs "$t0" "$t1")
    t0=$(now); cp "$FILE" "$WORK/cp.bin"; t1=$(now); cp2=$(secs "$t0" "$t1"); rm -f "$WORK/cp.bin"
    echo "$push $cp1 $pull $cp2"
}

# series NAME REMOTE CLEAR: ROUNDS rounds, the remote emptied by CLEAR before each push; with
# BASE, each round measures both binaries (BIN first in odd rounds, BASE first in even ones).
series() {
    local name="$1" remote="$2" clear="$3" r which bin push cp1 pull cp2
    local -A pr=() lr=()
    for r in $(seq 1 "$ROUNDS"); do
        local order="bin"
        [ -n "$BASE" ] && { [ $((r % 2)) = 1 ] && order="bin base" || order="base bin"; }
        for which in $order; do
            bin="$BIN"; [ "$which" = base ] && bin="$BASE"
            eval "$clear"
            read -r push cp1 pull cp2 < <(round "$which" "$bin" "$remote")
            pr[$which]+=" $(ratio "$push" "$cp1")"
            lr[$which]+=" $(ratio "$pull" "$cp2")"
            echo "{\"bench\":\"$name\",\"binary\":\"$which\",\"round\":$r,\"mb\":$SIZE_MB,\"push_s\":$push,\"cp_s\":$cp1,\"pull_s\":$pull,\"cp2_s\":$cp2,\"push_mb_s\":$(python3 -c "print(round($SIZE_MB/$push))"),\"pull_mb_s\":$(python3 -c "print(round($SIZE_MB/$pull))"),\"cp_mb_s\":$(python3 -c "print(round($SIZE_MB/$cp1))")}"
        done
    done
    for which in bin ${BASE:+base}; do
        # shellcheck disable=SC2086 # the ratios are one word each
        echo "{\"bench\":\"$name\",\"binary\":\"$which\",\"summary\":true,\"date\":\"$(date -u +%FT%TZ)\",\"commit\":\"$commit\",\"rounds\":$ROUNDS,\"push_over_cp_median\":$(median ${pr[$which]}),\"pull_over_cp_median\":$(median ${lr[$which]})}"
    done
}

series dir "$WORK/remote" 'rm -rf "$WORK/remote"'

# moto's S3 server (it keeps objects in memory: a 1 GB object costs it a few GB of RAM).
if python3 -c "import moto.server" 2>/dev/null; then
    port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    python3 -m moto.server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
    MOTO_PID=$!
    for _ in $(seq 1 100); do curl -sf -X PUT "http://127.0.0.1:$port/bench" >/dev/null && break; sleep 0.2; done
    export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
    export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
    series moto "s3://bench/lab" 'curl -sf -X POST "http://127.0.0.1:$port/moto-api/reset" >/dev/null; curl -sf -X PUT "http://127.0.0.1:$port/bench" >/dev/null'
    unset AWS_ENDPOINT_URL
else
    echo '{"bench":"moto","skipped":"python3 -m moto.server is not available (pip install \"moto[server]\")"}'
fi

# 1,000 small artifacts, all on the remote already: the push is one listing.
mkdir -p "$WORK/many"
{
    echo "stages:"
    echo "  part:"
    echo "    matrix: {i: [$(seq -s, 1 "$N")]}"
    echo "    cmd: \"echo \${params.i} > \$PIPELINE_OUT/part.txt\""
} > "$WORK/many/pipeline.yaml"
"$BIN" -q -f "$WORK/many/pipeline.yaml" run
"$BIN" -q -f "$WORK/many/pipeline.yaml" push --remote "$WORK/many-remote"
times=()
for r in $(seq 1 5); do
    t0=$(now); "$BIN" -q -f "$WORK/many/pipeline.yaml" push --remote "$WORK/many-remote"; t1=$(now)
    times+=("$(secs "$t0" "$t1")")
done
echo "{\"bench\":\"push_all_present\",\"summary\":true,\"date\":\"$(date -u +%FT%TZ)\",\"commit\":\"$commit\",\"artifacts\":$N,\"seconds\":[$(IFS=,; echo "${times[*]}")],\"median_s\":$(median "${times[@]}")}"
