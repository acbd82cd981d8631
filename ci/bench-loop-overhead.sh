#!/bin/sh
# Benchmark: loopexec's own overhead per iteration.
#
# Runs N (default 100) iterations of exec `true` / check `false` through loopexec (release build,
# host zone, full receipt: 4 events per iteration, each appended with fdatasync) and the same two
# commands in a plain shell loop, spawned the way loopexec spawns them (`/bin/sh -c`). Prints both
# wall times, the overhead per iteration and the ratio (best of 3 rounds).
#
# The receipt's fsyncs make the result depend on the disk: the script also measures the disk's
# synchronous-write latency and, when /dev/shm exists, repeats the loopexec run with the state
# directory on tmpfs, which shows the runtime's own cost without the disk.
# Target: overhead under 2 ms per iteration.
# Usage: ci/bench-loop-overhead.sh [ITERATIONS]
set -eu
cd "$(dirname "$0")/.."
N=${1:-100}
ROUNDS=3
cargo build --release --quiet --bin loopexec --bin loopexec-zone-init
BIN=$PWD/target/release/loopexec
work=$(mktemp -d)
shm=
if [ -d /dev/shm ] && [ -w /dev/shm ]; then shm=$(mktemp -d /dev/shm/loopexec-bench.XXXXXX); fi
trap 'rm -rf "$work" ${shm:+"$shm"}' EXIT

now_ns() { date +%s%N; }

plain_loop() {
  i=0
  while [ "$i" -lt "$N" ]; do
    /bin/sh -c true
    /bin/sh -c false || :
    i=$((i + 1))
  done
}

# Wall time (ns) of one loopexec run of N iterations with its workdir under $1.
loopexec_once() {
  dir=$(mktemp -d "$1/run.XXXXXX")
  code=0
  t0=$(now_ns)
  "$BIN" run --json --workdir "$dir" --isolation none --exec true --check false \
    --max-iterations "$N" > "$dir.out.json" || code=$?
  t1=$(now_ns)
  if [ "$code" -ne 12 ]; then
    echo "loopexec exited $code, expected 12 (max_iterations_reached):" >&2
    cat "$dir.out.json" >&2
    exit 1
  fi
  echo $((t1 - t0))
}

min() { if [ -z "$1" ] || [ "$2" -lt "$1" ]; then echo "$2"; else echo "$1"; fi; }

best_plain=; best_disk=; best_shm=
r=0
while [ "$r" -lt "$ROUNDS" ]; do
  t0=$(now_ns); plain_loop; t1=$(now_ns)
  best_plain=$(min "$best_plain" $((t1 - t0)))
  best_disk=$(min "$best_disk" "$(loopexec_once "$work")")
  if [ -n "$shm" ]; then best_shm=$(min "$best_shm" "$(loopexec_once "$shm")"); fi
  r=$((r + 1))
done

# Synchronous-write latency of the disk under the workdir: 100 x (512-byte write + sync).
t0=$(now_ns)
dd if=/dev/zero of="$work/sync-probe" bs=512 count=100 oflag=dsync 2>/dev/null
t1=$(now_ns)
sync_ns=$(( (t1 - t0) / 100 ))

awk -v n="$N" -v p="$best_plain" -v l="$best_disk" -v s="$best_shm" -v y="$sync_ns" 'BEGIN {
  printf "iterations                 %d (exec true, check false)\n", n
  printf "plain shell loop           %.1f ms (%.3f ms/iteration)\n", p / 1e6, p / 1e6 / n
  printf "loopexec                   %.1f ms (%.3f ms/iteration)\n", l / 1e6, l / 1e6 / n
  printf "overhead                   %.3f ms/iteration (target < 2 ms)\n", (l - p) / 1e6 / n
  printf "ratio                      %.2fx\n", l / p
  printf "disk sync latency          %.3f ms per synchronous write (receipt: 4 per iteration)\n", y / 1e6
  if (s != "") {
    printf "loopexec, state on tmpfs   %.1f ms (%.3f ms/iteration)\n", s / 1e6, s / 1e6 / n
    printf "overhead without disk sync %.3f ms/iteration, ratio %.2fx\n", (s - p) / 1e6 / n, s / p
  }
}'
