#!/bin/sh
# Benchmark: probe-check's parallel runs against the same runs one after another.
#
# probe-check of a 100 ms check (`sleep 0.1`) certifying 5% at 95% (59 runs, the default target)
# with --jobs J (default: the cores) and with --jobs 1, side by side on the same tree, in the exec
# zone (ISOLATION=native, the default) or on the host (ISOLATION=none). Prints both wall times and
# the ratio parallel/serial (best of ROUNDS rounds each). Target on a 2-core machine: at most 0.6.
# Usage: ci/bench-probe.sh [JOBS]   (LOOPEXEC_BIN=path to skip the release build)
set -eu
cd "$(dirname "$0")/.."
JOBS=${1:-$(nproc)}
ROUNDS=${ROUNDS:-3}
ISOLATION=${ISOLATION:-native}
if [ -z "${LOOPEXEC_BIN:-}" ]; then
  cargo build --release --quiet --bin loopexec --bin loopexec-zone-init
  LOOPEXEC_BIN=$PWD/target/release/loopexec
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 711 "$work"
echo "a tree" > "$work/file"
# probe-check signs its receipt: an operator key for the benchmark, outside the probed tree.
keys=$(mktemp -d)
trap 'rm -rf "$work" "$keys"' EXIT
"$LOOPEXEC_BIN" keygen --dir "$keys" >/dev/null
export LOOPEXEC_CONFIG_DIR="$keys"

now_ns() { date +%s%N; }

# Best wall time (ms) of ROUNDS probes with --jobs $1.
best_ms() {
  best=
  r=0
  while [ "$r" -lt "$ROUNDS" ]; do
    t0=$(now_ns)
    "$LOOPEXEC_BIN" --json probe-check --workdir "$work" --isolation "$ISOLATION" --check 'sleep 0.1' --jobs "$1" >"$work/../probe-bench-out.$$" || {
      cat "$work/../probe-bench-out.$$" >&2; rm -f "$work/../probe-bench-out.$$"; exit 1; }
    grep -q '"verdict":"certified"' "$work/../probe-bench-out.$$" || { echo "not certified:" >&2; cat "$work/../probe-bench-out.$$" >&2; exit 1; }
    rm -f "$work/../probe-bench-out.$$"
    ms=$(( ($(now_ns) - t0) / 1000000 ))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
    r=$((r + 1))
  done
  echo "$best"
}

serial=$(best_ms 1)
parallel=$(best_ms "$JOBS")
echo "probe-check, 59 runs of a 100 ms check ($ISOLATION isolation)"
echo "serial   (--jobs 1)      ${serial} ms"
echo "parallel (--jobs $JOBS)      ${parallel} ms"
awk -v p="$parallel" -v s="$serial" 'BEGIN { printf "ratio    parallel/serial %.3f (target <= 0.6)\n", p / s }'
