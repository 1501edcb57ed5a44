#!/usr/bin/env bash
# First run, no-op run and planning of a matrix of N trivial `cmd` instances (the first
# run was once quadratic in the instances: 1,000 in 8.7 s, 10,000 in 7 min 41 s with `-j2`).
#
#   benches/first_run.sh [N ...]        # N: 1000 3000 10000 by default
#
# PIPELINE_BIN: the binary to measure (target/release/pipeline by default; figures for the
# README come from a release build). PIPELINE_BASE: a second binary (the commit before a
# change), measured on the same sizes right after the first, each in a fresh workspace.
# JOBS (2) is `--jobs`. WORK is the scratch folder (/tmp).
#
# For each binary and N it prints, in seconds and milliseconds per instance:
#   first  `pipeline run --jobs JOBS -q` on an empty store (every instance runs `true`);
#   noop   the same run again (every instance cached);
#   plan   `pipeline status` (plan, fingerprint, check the store; runs nothing).
# The first run's per-instance figure should stay about flat as N grows.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${PIPELINE_BIN:-target/release/pipeline}")"
BASE="${PIPELINE_BASE:+$(realpath "$PIPELINE_BASE")}"
JOBS="${JOBS:-2}"
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(1000 3000 10000)
WORK="$(mktemp -d "${WORK:-/tmp}/first-run-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
unset PIPELINE_REMOTE

now() { date +%s.%N; }
# Prints "LABEL N PHASE SECONDS MS_PER_INSTANCE".
report() {
    python3 -c "import sys; l, n, ph, a, b = sys.argv[1:]; s = float(b) - float(a); print(f'{l:<6} {int(n):>6} {ph:<6} {s:9.2f} s {s * 1000 / int(n):8.2f} ms/instance')" "$@"
}

# A workspace whose pipeline.yaml has one stage with a matrix of N values.
workspace() {
    local dir="$1" n="$2"
    mkdir -p "$dir"
    python3 - "$dir/pipeline.yaml" "$n" <<'EOF'
import sys
path, n = sys.argv[1], int(sys.argv[2])
values = ", ".join(str(v) for v in range(n))
open(path, "w").write(f"stages:\n  t:\n    cmd: 'true'\n    matrix: {{v: [{values}]}}\n")
EOF
}

measure() {
    local label="$1" bin="$2" n="$3"
    local dir="$WORK/$label-$n"
    workspace "$dir" "$n"
    local t0 t1
    t0=$(now)
    "$bin" -f "$dir/pipeline.yaml" run --jobs "$JOBS" -q
    t1=$(now)
    report "$label" "$n" first "$t0" "$t1"
    t0=$(now)
    "$bin" -f "$dir/pipeline.yaml" run --jobs "$JOBS" -q
    t1=$(now)
    report "$label" "$n" noop "$t0" "$t1"
    t0=$(now)
    "$bin" -f "$dir/pipeline.yaml" status >/dev/null
    t1=$(now)
    report "$label" "$n" plan "$t0" "$t1"
    rm -rf "$dir"
}

echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores; --jobs $JOBS"
echo "# bin:  $BIN"
if [ -n "$BASE" ]; then echo "# base: $BASE"; fi
for n in "${SIZES[@]}"; do
    measure bin "$BIN" "$n"
    if [ -n "$BASE" ]; then measure base "$BASE" "$n"; fi
done
