#!/bin/bash
# Zone limits read and enforced (memory, pids, cpu), as the current user in its login session:
# a policy with a 64 MiB memory, 16 pids and 20 % CPU budget; the zone cgroup's files are read
# from outside while a zone runs, then each limit is exceeded from inside a zone.
#   limits.sh   prints "LIMIT <what> ok|FAIL ..." lines; exit 0 when all are ok
set -u
bin=/opt/loopexec/loopexec
dir=$(mktemp -d "${TMPDIR:-/tmp}/limits.XXXXXX")
cat > "$dir/limits.toml" <<'TOML'
[filesystem]
read_only = ["/usr", "/bin", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/passwd", "/etc/group"]
[resources]
memory_bytes = 67108864
pids_max = 16
cpu_percent = 20
wall_clock_seconds = 60
TOML
fail=0
report() { echo "LIMIT $1 $2 ${3:-}"; [ "$2" = ok ] || fail=1; }
zone() { "$bin" sandbox --policy "$dir/limits.toml" -- "$@"; }

# The cgroup of the one running zone of this user (waits for it to appear, at most 10 s).
find_zone() {
  local d
  for _ in $(seq 1 100); do
    d=$(find /sys/fs/cgroup -name "loopexec-zone-*" -type d -user "$(id -u)" 2>/dev/null | while read -r c; do
      [ -n "$(cat "$c/cgroup.procs" 2>/dev/null)" ] && echo "$c"; done | head -1)
    [ -n "$d" ] && { echo "$d"; return; }
    sleep 0.1
  done
}

# Read: the zone cgroup's limits while a zone sleeps.
zone /bin/sh -c 'sleep 4' & pid=$!
cg=$(find_zone)
if [ -n "$cg" ]; then
  got="memory.max=$(cat "$cg/memory.max") pids.max=$(cat "$cg/pids.max") cpu.max=$(cat "$cg/cpu.max" | tr ' ' /)"
  [ "$got" = "memory.max=67108864 pids.max=16 cpu.max=20000/100000" ] && report read ok "$got" || report read FAIL "$got"
else
  report read FAIL "no running zone cgroup found"
fi
wait $pid

# Memory: holding 200 MiB in a 64 MiB zone gets the command killed (SIGKILL: exit 137).
zone /usr/bin/python3 -c 'b = bytearray(200 << 20); b[::4096] = b"x" * len(b[::4096]); print("survived")' > "$dir/mem.out" 2>&1
rc=$?
[ $rc = 137 ] && ! grep -q survived "$dir/mem.out" && report memory ok "exit $rc" || report memory FAIL "exit $rc $(tail -1 "$dir/mem.out")"

# Pids: forking stops below pids.max (16, the zone's init and shell included).
n=$(zone /usr/bin/python3 -c '
import os, time
n = 0
while n < 100:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3); os._exit(0)
    n += 1
print(n)' 2>/dev/null)
[ -n "$n" ] && [ "$n" -lt 16 ] && report pids ok "forks=$n" || report pids FAIL "forks=$n"

# CPU: a busy loop in a 20 % zone: the kernel throttles it (cpu.stat nr_throttled grows) and its
# usage over a 3 s window, read from the zone cgroup's cpu.stat, stays near 20 % of one CPU (well
# below the 100 % it would get unthrottled).
zone /bin/sh -c 'while :; do :; done' & pid=$!
cg=$(find_zone)
if [ -n "$cg" ]; then
  stat() { awk -v k="$1" '$1 == k { print $2 }' "$cg/cpu.stat"; }
  u0=$(stat usage_usec); n0=$(stat nr_throttled); t0=$(date +%s%N)
  sleep 3
  u1=$(stat usage_usec); n1=$(stat nr_throttled); t1=$(date +%s%N)
  share=$(( (u1 - u0) * 100000 / (t1 - t0) ))
  [ "$n1" -gt "$n0" ] && [ "$share" -le 40 ] && report cpu ok "cpu=${share}% throttled=$((n1 - n0))" \
    || report cpu FAIL "cpu=${share}% throttled=$((n1 - n0))"
else
  report cpu FAIL "no running zone cgroup found"
fi
kill $pid; wait $pid 2>/dev/null
rm -rf "$dir"
exit $fail
