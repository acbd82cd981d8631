#!/bin/sh
# Crash trials: N loops (natively sandboxed and `--isolation none`) whose supervisor is killed by
# SIGKILL at a random instant or at a chosen phase, each resumed to its halt and checked (chain,
# events lost or duplicated, state.json, orphans, credentials, the delivered branch). Prints the
# figures and every broken trial; exits non-zero when any trial broke one. The phases are the
# debug build's test stopping points, so this runs the debug build (tests/crash_trials.rs).
# Usage: ci/crash-trials.sh [N]   (default 100)   LOOPEXEC_CRASH_SEED=S reproduces a run.
set -eu
cd "$(dirname "$0")/.."
N=${1:-100}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
rc=0
LOOPEXEC_CRASH_TRIALS=$N cargo test --quiet --test crash_trials -- --nocapture >"$log" 2>&1 || rc=$?
grep -E '^(crash trials|trial |test result)' "$log" || true
[ "$rc" = 0 ] || tail -n 40 "$log"
echo "crash-trials.sh: $N trials in $(( $(date +%s) - start )) s, exit $rc"
exit "$rc"
