#!/bin/sh
# Workspace creation benchmark (issue 5): a generated repository of 100k files / ~1 GB, and the
# time to give an agent a workspace of it, against `git clone --no-local` of the same repository.
#
#   cold     : baseline materialised from the object store (first run for this tree), then the
#              run's overlay directories
#   warm     : the baseline is cached (every later run on the same commit): overlay directories only
#   zone     : warm + the overlay mounted inside a zone (`loopexec sandbox --overlay`, /bin/true),
#              reported with the same zone without overlay, so the mount's own cost shows
#   clone    : `git clone --no-local` (object copy + checkout), the usual way to get a detached copy
#
# Prints each time in ms and the ratios clone/warm, clone/zone-overlay-cost, clone/cold. Page
# cache is left warm for every measurement (we do not drop host caches). Target: warm >= 10x.
# Usage: ci/bench-workspace.sh [FILES] [TOTAL_MB]   (defaults 100000 1024); BENCH_DIR (/tmp).
#
# ci/bench-workspace.sh after-agent [FILES] [SPARSE_GB]   (defaults 200000 3): the work after a
# hostile agent step, end to end (`loopexec run --max-iterations 1`, release build): an agent that
# leaves FILES empty files, and one that leaves SPARSE_GB sparse files of 1 GiB each. Prints the
# wall time and peak RSS (largest process of the run, `/usr/bin/time -v`) of each run, the
# snapshot and delivery times from its receipt, and, side by side, the same content committed by
# plain git (`git add -A && git commit` in a scratch repository) with the ratio loopexec / git.
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = after-agent ]; then
    FILES=${2:-200000}
    SPARSE_GB=${3:-3}
    ROOT="${BENCH_DIR:-/tmp}/loopexec-bench-after-agent"
    rm -rf "$ROOT"
    mkdir -p "$ROOT/keys"
    chmod 0711 "$ROOT"
    cargo build --release --quiet --bin loopexec --bin loopexec-zone-init
    BIN="$PWD/target/release/loopexec"
    export LOOPEXEC_CONFIG_DIR="$ROOT/keys" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
    export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.com GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.com
    "$BIN" keygen --dir "$ROOT/keys" >/dev/null
    make_files="import os,sys
n=int(sys.argv[1])
for d in range((n + 999) // 1000):
    os.makedirs('many/%04d' % d)
    for f in range(min(1000, n - d * 1000)):
        open('many/%04d/%04d' % (d, f), 'w').close()"
    make_sparse="for i in \$(seq $SPARSE_GB); do truncate -s 1G sparse\$i; done"
    for case in files sparse; do
        repo="$ROOT/$case"
        mkdir -p "$repo"
        echo 41 > "$repo/answer"
        git -C "$repo" init -q -b main && git -C "$repo" add -A && git -C "$repo" commit -q -m t0
        chmod 0711 "$repo"
        if [ "$case" = files ]; then agent="/usr/bin/python3 -c \"$make_files\" $FILES"; what="$FILES empty files"; else agent="$make_sparse"; what="$SPARSE_GB x 1 GiB sparse files"; fi
        /usr/bin/time -v -o "$ROOT/$case.time" "$BIN" run --json --run-id bench --max-iterations 1 --exec "$agent" --check true --workdir "$repo" > "$ROOT/$case.json" 2>/dev/null || true
        wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$ROOT/$case.time")
        rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$ROOT/$case.time")
        receipt="$repo/.loopexec/runs/bench/receipt.jsonl"
        snap=$(grep '"type":"snapshot"' "$receipt" | field duration_ms)
        deliv=$(grep '"type":"halt"' "$receipt" | sed 's/.*"delivery":{//' | field duration_ms)
        # The same content, committed by git itself (the baseline: what git charges for it).
        plain="$ROOT/$case-git"
        mkdir -p "$plain" && cd "$plain" && git init -q -b main
        if [ "$case" = files ]; then /usr/bin/python3 -c "$make_files" "$FILES"; else for i in $(seq "$SPARSE_GB"); do truncate -s 1G "sparse$i"; done; fi

        /usr/bin/time -v -o "$ROOT/$case-git.time" sh -c 'git add -A && git commit -q -m plain'
        cd - >/dev/null
        git_wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$ROOT/$case-git.time")
        git_rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$ROOT/$case-git.time")
        secs() { echo "$1" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.1f", s }'; }
        echo "$what: loopexec run $(secs "$wall") s end to end (snapshot $snap ms, delivery $deliv ms), peak RSS $((rss / 1024)) MiB; git add+commit $(secs "$git_wall") s, peak RSS $((git_rss / 1024)) MiB; ratio loopexec/git $(awk -v a="$(secs "$wall")" -v b="$(secs "$git_wall")" 'BEGIN { if (b <= 0) b = 0.1; printf "%.1f", a / b }')x"
    done
    rm -rf "$ROOT"
    exit 0
fi
FILES=${1:-100000}
TOTAL_MB=${2:-1024}
BENCH_DIR=${BENCH_DIR:-/tmp}
ROOT="$BENCH_DIR/loopexec-bench-workspace"
REPO="$ROOT/repo-$FILES-$TOTAL_MB"
. ci/bench-lib.sh

now_ms() { date +%s%N | awk '{ printf "%.1f", $1 / 1000000 }'; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
sfield() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }

cargo build --release --quiet --bin loopexec --bin loopexec-zone-init --example workspace_bench
BIN=target/release/loopexec
WSB=target/release/examples/workspace_bench

mkdir -p "$ROOT"
chmod 0711 "$ROOT"
generated_repo "$REPO" "$FILES files / $TOTAL_MB MB" "$FILES" "$TOTAL_MB" <<'PY'
import os, random, sys
root, files, total_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(20261130)
avg = total_mb * 1024 * 1024 // files
for i in range(files):
    d = os.path.join(root, "pkg%03d" % (i // 1000), "mod%02d" % ((i // 100) % 10))
    os.makedirs(d, exist_ok=True)
    size = max(16, int(avg * (0.5 + rng.random())))
    # Hex text: source-like (compresses about 2:1), deterministic.
    data = rng.randbytes(size // 2).hex().encode()
    with open(os.path.join(d, "f%06d.txt" % i), "wb") as f:
        f.write(data)
PY
echo "repository: $(git -C "$REPO" ls-files | wc -l) files, $(du -sm --exclude=.git "$REPO" | cut -f1) MB of files, $(du -sm "$REPO/.git" | cut -f1) MB .git"

STATE="$ROOT/state"
RUNS="$ROOT/runs"
rm -rf "$STATE" "$RUNS" "$ROOT/clone"
mkdir -p "$STATE" "$RUNS"
chmod 0711 "$STATE" "$RUNS"

run_dir() { d="$RUNS/$1"; mkdir -p "$d"; chmod 0711 "$d"; echo "$d"; }

cold=$("$WSB" "$REPO" "$STATE" "$(run_dir cold)")
warm=$("$WSB" "$REPO" "$STATE" "$(run_dir warm)")
warm2=$("$WSB" "$REPO" "$STATE" "$(run_dir warm2)")
cold_ms=$(echo "$cold" | field total_ms)
warm_ms=$(echo "$warm2" | field total_ms)
snap_ms=$(echo "$warm2" | field snapshot_ms)
lower=$(echo "$warm2" | sfield lower)
upper=$(echo "$warm2" | sfield upper)
work=$(echo "$warm2" | sfield work)

# Zone with and without the overlay (best of 5 each, to keep scheduler noise out).
best() { sort -n | head -1; }
zone_plain=$(for i in 1 2 3 4 5; do a=$(now_ms); "$BIN" sandbox -- /bin/true; b=$(now_ms); elapsed "$a" "$b"; echo; done | best)
zone_overlay=$(for i in 1 2 3 4 5; do a=$(now_ms); "$BIN" sandbox --overlay "target=/ws,lower=$lower,upper=$upper,work=$work" -- /bin/sh -c 'test -f /ws/pkg000/mod00/f000000.txt'; b=$(now_ms); elapsed "$a" "$b"; echo; done | best)
mount_ms=$(awk -v a="$zone_overlay" -v b="$zone_plain" 'BEGIN { d = a - b; if (d < 0) d = 0; printf "%.1f", d }')
warm_zone_ms=$(awk -v a="$warm_ms" -v b="$mount_ms" 'BEGIN { printf "%.1f", a + b }')

a=$(now_ms)
git clone -q --no-local "$REPO" "$ROOT/clone"
b=$(now_ms)
clone_ms=$(elapsed "$a" "$b")

echo "cold baseline + workspace : $cold_ms ms (baseline $(echo "$cold" | field baseline_ms) ms)"
echo "warm workspace            : $warm_ms ms (first warm run: $(echo "$warm" | field total_ms) ms)"
echo "zone /bin/true            : $zone_plain ms without overlay, $zone_overlay ms with it (mount cost ~$mount_ms ms)"
echo "warm workspace + mount    : $warm_zone_ms ms"
echo "snapshot of $(echo "$warm2" | field entries | cut -d. -f1) entries : first $snap_ms ms (loads the baseline manifest), then $(echo "$warm2" | field snapshot_again_ms) ms per snapshot"
echo "git clone --no-local      : $clone_ms ms"
echo "ratio clone / warm            : $(ratio "$clone_ms" "$warm_ms")x"
echo "ratio clone / (warm + mount)  : $(ratio "$clone_ms" "$warm_zone_ms")x"
echo "ratio clone / cold            : $(ratio "$clone_ms" "$cold_ms")x"
rm -rf "$ROOT/clone" "$RUNS"
