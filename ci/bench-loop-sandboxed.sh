#!/bin/sh
# Benchmark: what the sandbox adds to each iteration of a loop.
#
# Runs N (default 30) iterations of exec `true` / check `false` (release build) three ways, in one
# run, best of ROUNDS (default 3) interleaved rounds each: `--isolation none` on a plain directory (the baseline), native
# isolation in place (agent zone + exec zone, two zone starts per iteration), and native isolation
# on a detached workspace of a small git repository (plus a snapshot and the check's throwaway
# overlay per iteration). Prints ms per iteration and the added cost against the baseline, and the
# load average before and after (other builds on the same cores skew every number: compare runs
# made at a similar load, or raise ROUNDS).
# Target: under 15 ms of added overhead per iteration.
# Usage: [ROUNDS=5] ci/bench-loop-sandboxed.sh [ITERATIONS]
#   LOOPEXEC_BENCH_ENGINES="podman docker"   also time the container backends (root), from
#   LOOPEXEC_BENCH_IMAGE (default localhost/loopexec-test-busybox:1, see ci/container-engines.sh)
set -eu
cd "$(dirname "$0")/.."
N=${1:-30}
IMAGE=${LOOPEXEC_BENCH_IMAGE:-localhost/loopexec-test-busybox:1}
ROUNDS=${ROUNDS:-3}
cargo build --release --quiet --bin loopexec --bin loopexec-zone-init
BIN=$PWD/target/release/loopexec
work=$(mktemp -d)
chmod 711 "$work"
export LOOPEXEC_CONFIG_DIR="$work/keys"
"$BIN" keygen --dir "$LOOPEXEC_CONFIG_DIR" >/dev/null
trap 'rm -rf "$work"' EXIT

now_ns() { date +%s%N; }
min() { if [ -z "$1" ] || [ "$2" -lt "$1" ]; then echo "$2"; else echo "$1"; fi; }

# Wall time (ns) of one run of N iterations; $1 = how (none | in-place | detached).
run_once() {
  dir=$(mktemp -d "$work/run.XXXXXX")
  chmod 711 "$dir"
  case "$1" in
    none) set -- --isolation none ;;
    in-place) set -- --isolation native --workspace in-place
              [ "$(id -u)" = 0 ] && chown 60200:60200 "$dir" ;;
    detached|podman|docker)
              printf 'x\n' > "$dir/file"
              git -C "$dir" init -q -b main && git -C "$dir" add -A
              git -C "$dir" -c user.name=b -c user.email=b@example.invalid commit -q -m t0
              case "$1" in
                detached) set -- --isolation native --workspace detached ;;
                *) set -- --isolation native --workspace detached --backend "$1" --image "$IMAGE" ;;
              esac ;;
  esac
  code=0
  t0=$(now_ns)
  "$BIN" run --json --workdir "$dir" "$@" --exec true --check false --max-iterations "$N" > "$dir.out.json" || code=$?
  t1=$(now_ns)
  if [ "$code" -ne 12 ]; then
    echo "loopexec exited $code, expected 12 (max_iterations_reached):" >&2
    cat "$dir.out.json" >&2
    exit 1
  fi
  echo $((t1 - t0))
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
best_none=; best_inplace=; best_detached=
r=0
while [ "$r" -lt "$ROUNDS" ]; do
  best_none=$(min "$best_none" "$(run_once none)")
  best_inplace=$(min "$best_inplace" "$(run_once in-place)")
  best_detached=$(min "$best_detached" "$(run_once detached)")
  r=$((r + 1))
done

awk -v n="$N" -v rounds="$ROUNDS" -v a="$best_none" -v b="$best_inplace" -v c="$best_detached" \
    -v load="$load_before -> $(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
  printf "iterations                      %d (exec true, check false), best of %d\n", n, rounds
  printf "load average (1/5/15 min)       %s on %d cores\n", load, '"$(nproc)"'
  printf "isolation none                  %.2f ms/iteration\n", a / 1e6 / n
  printf "native, in place                %.2f ms/iteration  (+%.2f ms, %.2fx)\n", b / 1e6 / n, (b - a) / 1e6 / n, b / a
  printf "native, detached workspace      %.2f ms/iteration  (+%.2f ms, %.2fx)\n", c / 1e6 / n, (c - a) / 1e6 / n, c / a
  printf "target                          added overhead < 15 ms/iteration\n"
}'
# Optional: the container backends, same detached loop (root; engines prepared, e.g. by
# ci/container-engines.sh start DIR && . DIR/env). No target: a container start costs what the
# engine costs.
for engine in ${LOOPEXEC_BENCH_ENGINES:-}; do
  best=
  r=0
  while [ "$r" -lt "$ROUNDS" ]; do
    best=$(min "$best" "$(run_once "$engine")")
    r=$((r + 1))
  done
  awk -v n="$N" -v a="$best_none" -v b="$best" -v e="$engine" 'BEGIN {
    printf "%-31s %.2f ms/iteration  (+%.2f ms, %.2fx)\n", "--backend " e ", detached", b / 1e6 / n, (b - a) / 1e6 / n, b / a
  }'
done
