#!/bin/sh
# Startup cost of a zone: `loopexec sandbox -- /bin/true` (user/mount/pid/net/ipc/uts/cgroup
# namespaces, Landlock, seccomp, capabilities dropped, cgroup budget) against bubblewrap with
# comparable namespaces and against bare /bin/true, interleaved in one run. Prints wall medians,
# CPU means (user + sys of each case's whole process tree, from getrusage(RUSAGE_CHILDREN)
# deltas), both ratios against bwrap, and the load average.
# Usage: [LOOPEXEC_BIN=path] ci/bench-sandbox.sh [RUNS]   (default 200; installs Debian's bubblewrap
# if missing; LOOPEXEC_BIN: measure that binary instead of building this tree's)
set -eu
cd "$(dirname "$0")/.."
RUNS=${1:-200}
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null; }
    else
        echo "bench-sandbox.sh: bubblewrap missing; run as root or apt-get install bubblewrap" >&2; exit 2
    fi
fi
if [ -n "${LOOPEXEC_BIN:-}" ]; then
    LOOPEXEC=$LOOPEXEC_BIN   # another build (e.g. before a change), its zone init beside it if it has one
else
    cargo build --release --quiet --bin loopexec --bin loopexec-zone-init
    LOOPEXEC=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/loopexec
fi
# Second loopexec case: the same filesystem view bwrap gets here (the whole host read-only),
# instead of exec.toml's short list of system directories (19 binds).
SAME_VIEW=$(mktemp)
trap 'rm -f "$SAME_VIEW"' EXIT
printf '[filesystem]\nread_only = ["/"]\n[env]\nset = { PATH = "/usr/bin:/bin" }\n' > "$SAME_VIEW"
cd /
python3 - "$RUNS" "$LOOPEXEC" "$SAME_VIEW" <<'PY'
import os, resource, statistics, subprocess, sys, time
runs, loopexec, same_view = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cases = {
    "bare /bin/true": ["/bin/true"],
    "bwrap": ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
              "--die-with-parent", "--new-session", "/bin/true"],
    "loopexec sandbox": [loopexec, "sandbox", "--", "/bin/true"],
    "loopexec, / ro": [loopexec, "sandbox", "--policy", same_view, "--", "/bin/true"],
}
def children_cpu_ms():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r.ru_utime + r.ru_stime) * 1000
def one(argv):
    """Wall ms, and the CPU ms (user + sys) of the process and every descendant it waited for."""
    cpu, t = children_cpu_ms(), time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1000, children_cpu_ms() - cpu
for argv in cases.values():  # warm up caches, check each case works
    one(argv)
load_before = os.getloadavg()
wall = {name: [] for name in cases}
cpu = {name: [] for name in cases}
for _ in range(runs):  # interleaved, so that load changes hit every case alike
    for name, argv in cases.items():
        w, c = one(argv)
        wall[name].append(w)
        cpu[name].append(c)
load_after = os.getloadavg()
mw = {n: statistics.median(s) for n, s in wall.items()}
mc = {n: statistics.mean(s) for n, s in cpu.items()}  # getrusage ticks are coarse: the mean
print(f"runs per case: {runs}; load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
      f"(1 min; {os.cpu_count()} CPUs)")
for n in cases:
    print(f"{n:18} wall median {mw[n]:7.3f} ms   p90 {statistics.quantiles(wall[n], n=10)[8]:7.3f} ms"
          f"   CPU mean {mc[n]:7.3f} ms")
for n, what in [("loopexec sandbox", "exec.toml: 19 read-only binds"),
                ("loopexec, / ro", "same view as bwrap")]:
    print(f"{n + ' / bwrap':28}: wall {mw[n] / mw['bwrap']:.2f}   CPU {mc[n] / mc['bwrap']:.2f}   ({what})")
print(f"{'bwrap / bare':28}: wall {mw['bwrap'] / mw['bare /bin/true']:.2f}   CPU {mc['bwrap'] / max(mc['bare /bin/true'], 0.001):.2f}")
for n in ["loopexec sandbox", "loopexec, / ro"]:
    met = mw[n] <= mw["bwrap"] and mc[n] <= 2 * mc["bwrap"]
    print(f"target for {n}: wall ratio <= 1.00 and CPU ratio <= 2.00 ->", "MET" if met else "NOT MET")
PY
