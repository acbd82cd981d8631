#!/bin/sh
# What holding every protected path of t0 read-only in the check's zone costs (issue 19 item 8):
# a t0 with N protected test files outside any protected directory (`pkg/test_NNNNN.py`, each one
# read-only bind in the check's mount namespace, plus the pinned `pkg/`), for N in 0, 1000, 2000
# and 3500 (near the cap: MAX_HOLD_BYTES, 128 KiB of held paths in the zone's plan, a path here
# costing 37). Each run's agent changes nothing and its check is `true`; prints, per N, the
# median `duration_ms` of the runs' `check_result` events (the check's zone start, holds
# included, and `true`) and the median wall time of a run.
#
# Usage: ci/bench-holds.sh [ROUNDS]   (default 3); BENCH_DIR (/tmp). Native isolation (root, or a
# host where the unprivileged zone runs).
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
ROOT="${BENCH_DIR:-/tmp}/loopexec-bench-holds"
cargo build --quiet --bin loopexec --bin loopexec-zone-init
BIN="$PWD/target/debug/loopexec"
. ci/bench-env.sh
now_ms() { date +%s%N | awk '{ printf "%.0f", $1 / 1000000 }'; }

printf '%8s %18s %14s\n' held check_median_ms run_wall_ms
for n in 0 1000 2000 3500; do
    repo="$ROOT/repo-$n"
    mkdir -p "$repo/pkg" && chmod 0755 "$repo"
    python3 -c 'import sys; [open(f"{sys.argv[1]}/pkg/test_{i:05}.py", "w").close() for i in range(int(sys.argv[2]))]' "$repo" "$n"
    echo "t0" > "$repo/README"
    (cd "$repo" && git init -q -b main && git add -A && git commit -q -m t0)
    checks="" walls=""
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        a=$(now_ms)
        (cd "$repo" && "$BIN" run --json --run-id "r$r" --no-baseline --max-iterations 1 --exec true --check true >/dev/null) || true
        b=$(now_ms)
        walls="$walls $((b - a))"
        checks="$checks $(python3 -c 'import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("type") == "check_result":
        print(e["duration_ms"])' "$repo/.loopexec/runs/r$r/receipt.jsonl" | tr '\n' ' ')"
        r=$((r + 1))
    done
    printf '%8s %18s %14s\n' "$n" "$(echo $checks | tr ' ' '\n' | med)" "$(echo $walls | tr ' ' '\n' | med)"
done
