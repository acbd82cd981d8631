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
# Target: under 8 ms of added overhead per iteration.
# Usage: [ROUNDS=5] ci/bench-loop-sandboxed.sh [ITERATIONS]
#   LOOPEXEC_BENCH_BASELINE=DIR   another checkout (e.g. `git worktree add DIR main`): its release
#                                 loopexec is built there (in DIR/target: copy a target/ into it
#                                 first to skip compiling the dependencies) and runs interleaved
#                                 with this one in every round; both are printed side by side
#   LOOPEXEC_BENCH_BASELINE_BIN=F the baseline's loopexec already built (instead of DIR)
#   LOOPEXEC_BENCH_ENGINES="podman docker"   also time the container backends (root), from
#   LOOPEXEC_BENCH_IMAGE (default localhost/loopexec-test-busybox:1, see ci/container-engines.sh)
set -eu
cd "$(dirname "$0")/.."
N=${1:-30}
IMAGE=${LOOPEXEC_BENCH_IMAGE:-localhost/loopexec-test-busybox:1}
ROUNDS=${ROUNDS:-3}
baseline=${LOOPEXEC_BENCH_BASELINE:-}
work=$(mktemp -d)
chmod 711 "$work"
trap 'rm -rf "$work"' EXIT
target=$PWD/target
baseline_bin=${LOOPEXEC_BENCH_BASELINE_BIN:-}
if [ -n "$baseline" ] && [ -z "$baseline_bin" ]; then
  [ -f "$baseline/Cargo.toml" ] || { echo "bench-loop-sandboxed: $baseline is no checkout" >&2; exit 2; }
  (cd "$baseline" && cargo build --release --quiet --bins)
  baseline_bin=$baseline/target/release/loopexec
fi
if [ -n "$baseline_bin" ]; then
  # Each build in its own directory: a zone init executable is found next to its loopexec.
  mkdir -m 711 "$work/baseline"
  cp "$baseline_bin" "$work/baseline/loopexec"
  chmod 755 "$work/baseline/loopexec"
  if [ -f "$(dirname "$baseline_bin")/loopexec-zone-init" ]; then
    cp "$(dirname "$baseline_bin")/loopexec-zone-init" "$work/baseline/"
    chmod 755 "$work/baseline/loopexec-zone-init"
  fi
  label="baseline ($(if [ -n "$baseline" ]; then git -C "$baseline" rev-parse --short HEAD; else echo "$baseline_bin"; fi))"
  baseline=yes
fi
cargo build --release --quiet --bin loopexec --bin loopexec-zone-init
mkdir -m 711 "$work/current"
cp "$target/release/loopexec" "$target/release/loopexec-zone-init" "$work/current/"
chmod 755 "$work/current/loopexec" "$work/current/loopexec-zone-init"
BIN=$work/current/loopexec
export LOOPEXEC_CONFIG_DIR="$work/keys"
# The runs' own temporary directories (the feedback file's) in the benchmark's, which nothing
# else on a shared machine cleans up under them.
mkdir -m 711 "$work/tmp"
export TMPDIR="$work/tmp"
"$BIN" keygen --dir "$LOOPEXEC_CONFIG_DIR" >/dev/null

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
base_none=; base_inplace=; base_detached=
r=0
while [ "$r" -lt "$ROUNDS" ]; do
  if [ -n "$baseline" ]; then
    BIN=$work/baseline/loopexec
    t=$(run_once none) || exit 1
    base_none=$(min "$base_none" "$t")
    t=$(run_once in-place) || exit 1
    base_inplace=$(min "$base_inplace" "$t")
    t=$(run_once detached) || exit 1
    base_detached=$(min "$base_detached" "$t")
    BIN=$work/current/loopexec
  fi
  t=$(run_once none) || exit 1
  best_none=$(min "$best_none" "$t")
  t=$(run_once in-place) || exit 1
  best_inplace=$(min "$best_inplace" "$t")
  t=$(run_once detached) || exit 1
  best_detached=$(min "$best_detached" "$t")
  r=$((r + 1))
done

report() { # LABEL NONE IN_PLACE DETACHED
  awk -v n="$N" -v a="$2" -v b="$3" -v c="$4" -v label="$1" 'BEGIN {
    printf "%s\n", label
    printf "  isolation none                %.2f ms/iteration\n", a / 1e6 / n
    printf "  native, in place              %.2f ms/iteration  (+%.2f ms, %.2fx)\n", b / 1e6 / n, (b - a) / 1e6 / n, b / a
    printf "  native, detached workspace    %.2f ms/iteration  (+%.2f ms, %.2fx)\n", c / 1e6 / n, (c - a) / 1e6 / n, c / a
  }'
}
awk -v n="$N" -v rounds="$ROUNDS" -v load="$load_before -> $(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
  printf "iterations                      %d (exec true, check false), best of %d\n", n, rounds
  printf "load average (1/5/15 min)       %s on %d cores\n", load, '"$(nproc)"'
  printf "target                          added overhead < 8 ms/iteration\n"
}'
if [ -n "$baseline" ]; then
  report "$label" "$base_none" "$base_inplace" "$base_detached"
  report "this checkout ($(git rev-parse --short HEAD))" "$best_none" "$best_inplace" "$best_detached"
else
  report "loopexec" "$best_none" "$best_inplace" "$best_detached"
fi
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
