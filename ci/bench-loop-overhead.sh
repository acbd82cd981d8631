#!/bin/sh
# Benchmark: loopexec's own overhead per iteration.
#
# Runs N (default 100) iterations of exec `true` / check `false` through loopexec (release build,
# host zone, full receipt: 3 events per iteration in 2 groups, each group one write + fdatasync)
# and the same two commands in a plain shell loop, spawned the way loopexec spawns them
# (`/bin/sh -c`). Prints both wall times, the overhead per iteration and the ratio (best of
# ROUNDS interleaved rounds), and the load average before and after.
#
# The receipt's fdatasyncs make the result depend on the disk: the script also measures the disk's
# synchronous-write latency and, when /dev/shm exists, repeats the loopexec run with the state
# directory on tmpfs, which shows the runtime's own cost without the disk.
# Target: overhead under 1.5 ms per iteration.
# Usage: [ROUNDS=3] ci/bench-loop-overhead.sh [ITERATIONS]
#   LOOPEXEC_BENCH_BASELINE=DIR   another checkout (e.g. `git worktree add DIR main`): its release
#                                 loopexec is built there (in DIR/target: copy a target/ into it
#                                 first to skip compiling the dependencies) and runs interleaved
#                                 with this one in every round; both are printed side by side
#   LOOPEXEC_BENCH_BASELINE_BIN=F the baseline's loopexec already built (instead of DIR)
set -eu
cd "$(dirname "$0")/.."
N=${1:-100}
ROUNDS=${ROUNDS:-3}
baseline=${LOOPEXEC_BENCH_BASELINE:-}
work=$(mktemp -d)
shm=
if [ -d /dev/shm ] && [ -w /dev/shm ]; then shm=$(mktemp -d /dev/shm/loopexec-bench.XXXXXX); fi
trap 'rm -rf "$work" ${shm:+"$shm"}' EXIT

target=$PWD/target
baseline_bin=${LOOPEXEC_BENCH_BASELINE_BIN:-}
if [ -n "$baseline" ] && [ -z "$baseline_bin" ]; then
  [ -f "$baseline/Cargo.toml" ] || { echo "bench-loop-overhead: $baseline is no checkout" >&2; exit 2; }
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
export LOOPEXEC_CONFIG_DIR="$work/keys"
# The runs' own temporary directories (the feedback file's) in the benchmark's, which nothing
# else on a shared machine cleans up under them.
mkdir -m 711 "$work/tmp"
export TMPDIR="$work/tmp"
"$work/current/loopexec" keygen --dir "$LOOPEXEC_CONFIG_DIR" >/dev/null

now_ns() { date +%s%N; }

plain_loop() {
  i=0
  while [ "$i" -lt "$N" ]; do
    /bin/sh -c true
    /bin/sh -c false || :
    i=$((i + 1))
  done
}

# Wall time (ns) of one run of N iterations of loopexec $1 with its workdir under $2.
loopexec_once() {
  dir=$(mktemp -d "$2/run.XXXXXX")
  code=0
  t0=$(now_ns)
  "$1" run --json --workdir "$dir" --isolation none --exec true --check false \
    --max-iterations "$N" > "$dir.out.json" || code=$?
  t1=$(now_ns)
  if [ "$code" -ne 12 ]; then
    echo "loopexec exited $code, expected 12 (max_iterations_reached):" >&2
    cat "$dir.out.json" >&2
    exit 1
  fi
  rm -rf "$dir" "$dir.out.json"
  echo $((t1 - t0))
}

min() { if [ -z "$1" ] || [ "$2" -lt "$1" ]; then echo "$2"; else echo "$1"; fi; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
best_plain=; cur_disk=; cur_shm=; base_disk=; base_shm=
r=0
while [ "$r" -lt "$ROUNDS" ]; do
  t0=$(now_ns); plain_loop; t1=$(now_ns)
  best_plain=$(min "$best_plain" $((t1 - t0)))
  if [ -n "$baseline" ]; then
    t=$(loopexec_once "$work/baseline/loopexec" "$work") || exit 1
    base_disk=$(min "$base_disk" "$t")
  fi
  t=$(loopexec_once "$work/current/loopexec" "$work") || exit 1
  cur_disk=$(min "$cur_disk" "$t")
  if [ -n "$shm" ]; then
    if [ -n "$baseline" ]; then
      t=$(loopexec_once "$work/baseline/loopexec" "$shm") || exit 1
      base_shm=$(min "$base_shm" "$t")
    fi
    t=$(loopexec_once "$work/current/loopexec" "$shm") || exit 1
    cur_shm=$(min "$cur_shm" "$t")
  fi
  r=$((r + 1))
done

# Synchronous-write latency of the disk under the workdir: 100 x (512-byte write + sync).
t0=$(now_ns)
dd if=/dev/zero of="$work/sync-probe" bs=512 count=100 oflag=dsync 2>/dev/null
t1=$(now_ns)
sync_ns=$(( (t1 - t0) / 100 ))

report() { # LABEL DISK_NS SHM_NS
  awk -v n="$N" -v p="$best_plain" -v l="$2" -v s="$3" -v label="$1" 'BEGIN {
    printf "%-27s%.1f ms (%.3f ms/iteration)\n", label, l / 1e6, l / 1e6 / n
    printf "  overhead                 %.3f ms/iteration (target < 1.5 ms), ratio %.2fx\n", (l - p) / 1e6 / n, l / p
    if (s != "") {
      printf "  state on tmpfs           %.1f ms (%.3f ms/iteration)\n", s / 1e6, s / 1e6 / n
      printf "  overhead without disk    %.3f ms/iteration, ratio %.2fx\n", (s - p) / 1e6 / n, s / p
    }
  }'
}

awk -v n="$N" -v p="$best_plain" -v y="$sync_ns" -v rounds="$ROUNDS" \
    -v load="$load_before -> $(cut -d' ' -f1-3 /proc/loadavg)" -v cores="$(nproc)" 'BEGIN {
  printf "iterations                 %d (exec true, check false), best of %d rounds\n", n, rounds
  printf "load average (1/5/15 min)  %s on %d cores\n", load, cores
  printf "disk sync latency          %.3f ms per synchronous write\n", y / 1e6
  printf "plain shell loop           %.1f ms (%.3f ms/iteration)\n", p / 1e6, p / 1e6 / n
}'
if [ -n "$baseline" ]; then
  report "$label" "$base_disk" "$base_shm"
  report "this checkout ($(git rev-parse --short HEAD))" "$cur_disk" "$cur_shm"
  awk -v a="$base_disk" -v b="$cur_disk" -v n="$N" 'BEGIN {
    printf "this checkout / baseline   %.2fx wall (%+.3f ms/iteration)\n", b / a, (b - a) / 1e6 / n
  }'
else
  report "loopexec" "$cur_disk" "$cur_shm"
fi
