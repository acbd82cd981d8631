#!/bin/sh
# Startup cost of a zone: `loopexec sandbox -- /bin/true` (user/mount/pid/net/ipc/uts/cgroup
# namespaces, Landlock, seccomp, capabilities dropped, cgroup budget) against bubblewrap with
# comparable namespaces and against bare /bin/true, in one run. Prints medians and ratios.
# Usage: ci/bench-sandbox.sh [RUNS]   (default 200; installs Debian's bubblewrap if missing)
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
cargo build --release --quiet --bin loopexec
LOOPEXEC=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/loopexec
# Second loopexec case: the same filesystem view bwrap gets here (the whole host read-only),
# instead of exec.toml's short list of system directories (19 binds).
SAME_VIEW=$(mktemp)
trap 'rm -f "$SAME_VIEW"' EXIT
printf '[filesystem]\nread_only = ["/"]\n[env]\nset = { PATH = "/usr/bin:/bin" }\n' > "$SAME_VIEW"
cd /
python3 - "$RUNS" "$LOOPEXEC" "$SAME_VIEW" <<'PY'
import statistics, subprocess, sys, time
runs, loopexec, same_view = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cases = {
    "bare /bin/true": ["/bin/true"],
    "bwrap": ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
              "--die-with-parent", "--new-session", "/bin/true"],
    "loopexec sandbox": [loopexec, "sandbox", "--", "/bin/true"],
    "loopexec, / ro": [loopexec, "sandbox", "--policy", same_view, "--", "/bin/true"],
}
for argv in cases.values():  # warm up caches, check each case works
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
samples = {name: [] for name in cases}
for _ in range(runs):  # interleaved, so that load changes hit every case alike
    for name, argv in cases.items():
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        samples[name].append((time.perf_counter() - t) * 1000)
med = {n: statistics.median(s) for n, s in samples.items()}
print(f"runs per case: {runs}")
for n in cases:
    print(f"{n:18} median {med[n]:7.3f} ms   p90 {statistics.quantiles(samples[n], n=10)[8]:7.3f} ms")
print(f"loopexec / bwrap : {med['loopexec sandbox'] / med['bwrap']:.2f}   (exec.toml: 19 read-only binds)")
print(f"loopexec, / ro / bwrap : {med['loopexec, / ro'] / med['bwrap']:.2f}   (same view as bwrap)")
print(f"loopexec / bare  : {med['loopexec sandbox'] / med['bare /bin/true']:.2f}")
print(f"bwrap / bare     : {med['bwrap'] / med['bare /bin/true']:.2f}")
print("target: loopexec / bwrap <= 1.00 ->", "MET" if med['loopexec sandbox'] <= med['bwrap'] else "NOT MET")
PY
