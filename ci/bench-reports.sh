#!/bin/sh
# The receipt's bound under a check that matches many reports (issue 19 item 1, "Must show"): a
# loop whose check writes N one-test JUnit files matched by one `--report 'out/*.xml'` glob, at
# N = 10 (the baseline) and N = 10,000, run two ways: three red iterations (every report failing,
# exit 1) and one green judged iteration (every report passing, exit 0, a judge that approves,
# the confirmation rerun). Each with `--isolation none` and with the default (sandboxed) zones.
# Prints, side by side: the receipt's size, its largest line and that line's type, the judge
# packet's size (judged arm), the artifacts' total size, and the supervisor's peak RSS (GNU time's
# maximum resident set size of loopexec and the processes it waited for).
#
# Usage: ci/bench-reports.sh [N]   (default 10000); BENCH_DIR (/tmp); LOOPEXEC_BIN (another
# build to measure, e.g. one before a change; default: this tree's, built). Needs python3, git and
# /usr/bin/time; the sandboxed arm needs what the zones need (ci/setup.sh).
set -eu
cd "$(dirname "$0")/.."
N=${1:-10000}
ROOT="${BENCH_DIR:-/tmp}/loopexec-bench-reports"
if [ -n "${LOOPEXEC_BIN:-}" ]; then BIN=$LOOPEXEC_BIN; else cargo build --quiet --bin loopexec --bin loopexec-zone-init && BIN="$PWD/target/debug/loopexec"; fi
. ci/bench-env.sh

# check N FAIL EXIT: the check command writing N reports (failing when FAIL is 1), exiting EXIT.
check() {
    if [ "$2" = 1 ]; then case='<testcase classname=\"t\" name=\"c\"><failure message=\"no\"/></testcase>'; else case='<testcase classname=\"t\" name=\"c\"/>'; fi
    printf '%s' "python3 -c \"import os
os.makedirs('out', exist_ok=True)
for i in range($1):
    open('out/r%05d.xml' % i, 'w').write('<testsuite>$case</testsuite>')\"; exit $3"
}

# measure NAME ARGS...: run loopexec in a fresh repository, print one row.
measure() {
    name=$1
    shift
    repo="$ROOT/$name"
    mkdir -p "$repo" && chmod 0755 "$repo"
    echo t0 > "$repo/value.txt"
    git -C "$repo" init -q -b main && git -C "$repo" add -A && git -C "$repo" commit -q -m t0
    (cd "$repo" && /usr/bin/time -v "$BIN" run --json --no-baseline --run-id r "$@" >"$ROOT/$name.out" 2>"$ROOT/$name.time") || true
    run="$repo/.loopexec/runs/r"
    halt=$(sed -n 's/.*"halt_reason":"\([a-z_]*\)".*/\1/p' "$ROOT/$name.out" | head -n 1)
    receipt=$(stat -c %s "$run/receipt.jsonl")
    largest=$(awk '{ if (length($0) > m) { m = length($0); t = $0 } } END { sub(/.*"type":"/, "", t); sub(/".*/, "", t); printf "%d %s", m, t }' "$run/receipt.jsonl")
    packet=$(grep '"type":"judge"' "$run/receipt.jsonl" | sed -n 's/.*"packet_bytes":\([0-9]*\).*/\1/p' | head -n 1)
    artifacts=$(du -sb "$run/artifacts" 2>/dev/null | cut -f1)
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$ROOT/$name.time")
    printf '%-28s %-26s %12s %10s %-20s %12s %12s %10s\n' "$name" "${halt:-?}" "$receipt" "${largest% *}" "${largest#* }" "${packet:--}" "${artifacts:-0}" "$rss"
}

printf '%-28s %-26s %12s %10s %-20s %12s %12s %10s\n' arm halt receipt_bytes largest_line type packet_bytes artifact_bytes rss_kib
for iso in none sandboxed; do
    set --
    [ "$iso" = none ] && set -- --isolation none
    for n in 10 "$N"; do
        measure "red-$n-$iso" "$@" --exec "echo \$\$ > value.txt" --check "$(check "$n" 1 1)" --report 'out/*.xml' --max-iterations 3
        measure "judged-$n-$iso" "$@" --exec "echo good > value.txt" --check "$(check "$n" 0 0)" --report 'out/*.xml' --judge "cat >/dev/null; echo '{\"verdict\":\"approve\",\"reason\":\"ok\"}'" --max-iterations 1
    done
done
