#!/bin/sh
# Benchmark: how loopexec's own per-iteration cost grows with the workspace and the test suite.
#
# Two series of runs (release build, native isolation, detached workspace, ITERATIONS iterations
# each, default 6):
#   workspace   a generated git repository of 1k, 10k and 100k files; the agent changes the same
#               10 files every iteration, the check exits 1 without a report;
#   tests       a small repository whose check copies a pre-generated JUnit report of 100, 10k and
#               200k test ids (1% failing, the failing set alternating between two variants) and
#               exits 1: the evidence is read, the sets built and compared every iteration.
# Each iteration's time is split from its receipt (event timestamps, ms), medians over the
# iterations after the first:
#   agent zone     iteration_start -> exec_result, less the agent's own duration_ms
#   snapshot       the snapshot's duration_ms (the workspace read and its tree id)
#   agent guards   exec_result -> snapshot, less the snapshot
#   check zone     snapshot -> check_result, less the check's duration_ms (zone start, the check's
#                  overlay, the report read and its sets, the guards after the check)
#   progress       check_result -> the iteration's last event (the set comparisons of the ratchet)
#   to next        that -> the next iteration_start (acceptance or revert, the receipt's commit)
#   own            the iteration's wall time less the agent's and the check's durations
# and for each size the growth of `own` against the previous size: time ratio / size ratio, so
# 1.00 is linear growth and below 1 better than linear. Prints the load average before and after.
# Generated inputs are cached under target/bench-scale/ (deterministic).
# Usage: [ITERATIONS=6] ci/bench-scale.sh [workspace|tests|all]
#   LOOPEXEC_BENCH_FILES="1000 10000 100000"   workspace sizes
#   LOOPEXEC_BENCH_TESTS="100 10000 200000"    test-id counts
set -eu
cd "$(dirname "$0")/.."
. ci/bench-lib.sh
which=${1:-all}
N=${ITERATIONS:-6}
FILES=${LOOPEXEC_BENCH_FILES:-1000 10000 100000}
TESTS=${LOOPEXEC_BENCH_TESTS:-100 10000 200000}
cargo build --release --quiet --bin loopexec
BIN=$PWD/target/release/loopexec
cache=$PWD/target/bench-scale
mkdir -p "$cache"
work=$(mktemp -d)
chmod 711 "$work"
export LOOPEXEC_CONFIG_DIR="$work/keys"
# The runs' own temporary directories (the feedback file's) in the benchmark's, which nothing
# else on a shared machine cleans up under them.
mkdir -m 711 "$work/tmp"
export TMPDIR="$work/tmp"
"$BIN" keygen --dir "$LOOPEXEC_CONFIG_DIR" >/dev/null
trap 'rm -rf "$work"' EXIT

# The per-step medians of one receipt, as one line: own agent_zone snapshot agent_guards
# check_zone progress to_next (ms).
steps() {
  python3 - "$1" <<'PY'
import json, sys
from datetime import datetime
def ms(ts):
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() * 1000.0
events = [json.loads(l) for l in open(sys.argv[1])]
iters = {}
order = []
for e in events:
    n = e.get("iteration")
    if e["type"] == "iteration_start":
        iters[n] = {"start": ms(e["ts"]), "last": ms(e["ts"])}
        order.append(n)
        continue
    if n not in iters:
        continue
    it = iters[n]
    t = ms(e["ts"])
    if e["type"] == "exec_result":
        it["exec_at"], it["exec_ms"] = t, e.get("duration_ms", 0)
    elif e["type"] == "snapshot":
        it["snap_at"], it["snap_ms"] = t, e.get("duration_ms") or 0
    elif e["type"] == "check_result":
        it["check_at"], it["check_ms"] = t, e.get("duration_ms", 0)
    it["last"] = max(it["last"], t)
rows = []
for a, b in zip(order, order[1:]):
    it, nxt = iters[a], iters[b]
    if not all(k in it for k in ("exec_at", "snap_at", "check_at")):
        continue
    wall = nxt["start"] - it["start"]
    rows.append([
        wall - it["exec_ms"] - it["check_ms"],
        it["exec_at"] - it["start"] - it["exec_ms"],
        it["snap_ms"],
        it["snap_at"] - it["exec_at"] - it["snap_ms"],
        it["check_at"] - it["snap_at"] - it["check_ms"],
        it["last"] - it["check_at"],
        nxt["start"] - it["last"],
    ])
rows = rows[1:] or rows  # the first iteration warms the caches
if not rows:
    sys.exit("no complete iteration in the receipt")
med = [sorted(c)[len(c) // 2] for c in zip(*rows)]
print(" ".join("%.1f" % v for v in med))
PY
}

# One run of N iterations in a copy of repository $1, exec $2, check $3, extra args; prints steps.
run_steps() {
  repo=$1 exec=$2 check=$3
  shift 3
  dir=$(mktemp -d "$work/run.XXXXXX")
  chmod 711 "$dir"
  git clone -q --no-hardlinks "$repo" "$dir/ws"
  code=0
  "$BIN" run --json --workdir "$dir/ws" --isolation native --workspace detached \
    --exec "$exec" --check "$check" --max-iterations "$N" "$@" > "$dir/out.json" || code=$?
  receipt=$(ls "$dir"/ws/.loopexec/runs/*/receipt.jsonl 2>/dev/null | head -1)
  if [ -z "$receipt" ]; then
    echo "loopexec exited $code without a receipt:" >&2
    cat "$dir/out.json" >&2
    exit 1
  fi
  steps "$receipt"
  rm -rf "$dir"
}

header() {
  printf '%-10s %9s %9s %9s %9s %9s %9s %9s %8s\n' "$1" own "agent zone" snapshot "agent guards" "check zone" progress "to next" growth
}
row() { # SIZE PREV_SIZE PREV_OWN STEPS...
  size=$1 prev=$2 prev_own=$3
  shift 3
  growth=-
  if [ -n "$prev" ]; then
    growth=$(awk -v a="$1" -v b="$prev_own" -v s="$size" -v p="$prev" 'BEGIN {
      if (b <= 0) b = 0.1; printf "%.2f", (a / b) / (s / p) }')
  fi
  printf '%-10s %9s %9s %9s %9s %9s %9s %9s %8s\n' "$size" "$@" "$growth"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "iterations per run: $N (medians of iterations 2..$N, ms); growth = time ratio / size ratio"

if [ "$which" = all ] || [ "$which" = workspace ]; then
  header files
  prev=; prev_own=
  for files in $FILES; do
    repo=$cache/files-$files
    generated_repo "$repo" "a repository of $files files" "$files" <<'PY' >&2
import os, sys
root, count = sys.argv[1], int(sys.argv[2])
for i in range(count):
    d = os.path.join(root, "src", "d%03d" % (i // 100))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%02d.txt" % (i % 100)), "w") as f:
        f.write("file %d\n" % i * 4)
PY
    exec='for i in 0 1 2 3 4 5 6 7 8 9; do echo "$LOOPEXEC_ITERATION" >> src/d000/f0$i.txt; done'
    set -- $(run_steps "$repo" "$exec" false)
    row "$files" "$prev" "$prev_own" "$@"
    prev=$files prev_own=$1
  done
fi

if [ "$which" = all ] || [ "$which" = tests ]; then
  header "test ids"
  prev=; prev_own=
  for tests in $TESTS; do
    repo=$cache/tests-$tests
    generated_repo "$repo" "a JUnit report of $tests test ids" "$tests" <<'PY' >&2
import os, sys
root, count = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.join(root, "fixture"))
for variant in (0, 1):
    with open(os.path.join(root, "fixture", "r%d.xml" % variant), "w") as f:
        f.write('<?xml version="1.0"?>\n<testsuites><testsuite name="bench" tests="%d">\n' % count)
        for i in range(count):
            name = "case_%07d" % i
            f.write('<testcase classname="bench.module%03d" name="%s" time="0.001"' % (i % 1000, name))
            if i % 100 == variant:
                f.write('><failure message="boom">assert</failure></testcase>\n')
            else:
                f.write('/>\n')
        f.write('</testsuite></testsuites>\n')
with open(os.path.join(root, "iter"), "w") as f:
    f.write("0\n")
PY
    set -- $(run_steps "$repo" 'echo "$LOOPEXEC_ITERATION" > iter' \
      'cp fixture/r$(( $(cat iter) % 2 )).xml junit.xml; exit 1' --report junit.xml)
    row "$tests" "$prev" "$prev_own" "$@"
    prev=$tests prev_own=$1
  done
fi
echo "load average (1/5/15 min): $load_before -> $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
