#!/bin/sh
# Bulk verification (issue 26, "Must show"): `loopexec verify --all DIR` on N real sealed runs
# (default 100; `--isolation none` tiny loops halting at iteration 1, made once) against the
# baseline, verifying them one by one in a shell loop (`loopexec verify DIR/<id>`), side by side:
# the median wall time of R rounds (default 5) of each, their ratio, the cores and the load
# average before and after. Both arms check the same runs with the same key; each arm's exit
# code is checked (0: every run verified).
#
# Usage: ci/bench-verify-all.sh [N] [R]; BENCH_DIR (/tmp); LOOPEXEC_BIN (another build to
# measure; default: this tree's, built). Needs git and awk.
set -eu
cd "$(dirname "$0")/.."
N=${1:-100}
R=${2:-5}
ROOT="${BENCH_DIR:-/tmp}/loopexec-bench-verify-all"
if [ -n "${LOOPEXEC_BIN:-}" ]; then BIN=$LOOPEXEC_BIN; else cargo build --quiet --bin loopexec && BIN="$PWD/target/debug/loopexec"; fi
. ci/bench-env.sh
KEY="$ROOT/keys/operator.pub"
WORK="$ROOT/work"
mkdir -p "$WORK"
i=0
while [ "$i" -lt "$N" ]; do
    id=$(printf 'r%03d' "$i")
    (cd "$WORK" && "$BIN" run --json --run-id "$id" --isolation none --exec "echo 1 > it-$id" --check "test -s it-$id" >/dev/null) || [ $? -eq 11 ]
    i=$((i + 1))
done
RUNS="$WORK/.loopexec/runs"

now() { date +%s.%N; }
# elapsed START: seconds since START, three decimals.
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f\n", b - a }'; }

bulk() {
    t=$(now)
    "$BIN" verify --all "$RUNS" --pubkey "$KEY" >/dev/null
    elapsed "$t"
}
one_by_one() {
    t=$(now)
    for run in "$RUNS"/*; do
        "$BIN" verify "$run" --pubkey "$KEY" >/dev/null
    done
    elapsed "$t"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$ROOT/bulk" && : >"$ROOT/loop"
r=0
while [ "$r" -lt "$R" ]; do
    bulk >>"$ROOT/bulk"
    one_by_one >>"$ROOT/loop"
    r=$((r + 1))
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
b=$(med <"$ROOT/bulk")
l=$(med <"$ROOT/loop")
ratio=$(awk -v a="$l" -v b="$b" 'BEGIN { if (b <= 0) b = 0.001; printf "%.1f", a / b }')
printf '%-34s %10s\n' "arm ($N runs, median of $R)" seconds
printf '%-34s %10s\n' "one by one (shell loop of verify)" "$l"
printf '%-34s %10s\n' "verify --all (default jobs)" "$b"
printf 'ratio %sx  cores %s  load average before %s, after %s\n' "$ratio" "$(nproc)" "$load_before" "$load_after"
