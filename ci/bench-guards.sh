#!/bin/sh
# Guard evaluation benchmark (issue 12): a generated source repository of FILES files (Python,
# Rust, JavaScript and text, with test files, Cargo.toml and pyproject.toml per package) where
# the agent changed 10 files (4 production modules, 2 test files given one more assertion, 2 new
# modules, 1 Rust file, a dependency added to one Cargo.toml: an honest step, so no guard
# objects), and the time the guards take to judge that step, against `git status --porcelain` on
# the same repository with the same 10 changes in its working tree.
#
#   t0 facts : once per run: A0 (assertions over every t0 file with a grammar), H0 (the test
#              surface), the interpreter's module names
#   snapshot : reading the agent's layer back (the workspace's cost, every iteration)
#   guards   : metric integrity + tampering + awareness on that snapshot (every iteration;
#              awareness also printed on its own)
#   git      : `git status --porcelain` (index refreshed beforehand, so it stats every file)
#
# Rounds alternate snapshot, guards and git status side by side (ROUNDS, default 7), and each
# time printed is the median. Prints the ratios guards / git and (snapshot + guards) / git.
# Target: guards at most 1.5x git status. Page cache is left warm (host caches are not dropped).
# Usage: ci/bench-guards.sh [FILES] [ROUNDS]   (defaults 100000 7); BENCH_DIR (/tmp).
#
# ci/bench-guards.sh baseline [ROUNDS]   (default 3): the t0 baseline check run, cold against a
# cache hit, on a real suite (more-itertools 10.5.0 with an injected bug, 664 tests with Debian's
# pytest; ci/fetch-test-projects.sh caches it): per round, a new t0 tree (so the first run is
# cold), then `loopexec run --max-iterations 1` twice on it (each run: the baseline, an agent
# that does nothing, the check once); prints the medians of the runs' wall times, the cold
# baseline check's own duration, and the ratio cold / hit.
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = baseline ]; then
    ROUNDS=${2:-3}
    ROOT="${BENCH_DIR:-/tmp}/loopexec-bench-baseline"
    ARCHIVE=${LOOPEXEC_TEST_PROJECTS:-/var/cache/loopexec-test-projects}/more-itertools-10.5.0-5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6.tar.gz
    [ -f "$ARCHIVE" ] || ci/fetch-test-projects.sh
    cargo build --quiet --bin loopexec --bin loopexec-zone-init
    BIN="$PWD/target/debug/loopexec"
    rm -rf "$ROOT" && mkdir -p "$ROOT/keys" "$ROOT/repo" && chmod 0711 "$ROOT" "$ROOT/repo"
    export LOOPEXEC_CONFIG_DIR="$ROOT/keys" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
    export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.com GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.com
    "$BIN" keygen --dir "$ROOT/keys" >/dev/null
    tar -xzf "$ARCHIVE" -C "$ROOT/repo" --strip-components=1 --no-same-owner
    cd "$ROOT/repo"
    sed -i 's/    return sum(map(pred, iterable))$/    return sum(map(pred, iterable)) - 1/' more_itertools/recipes.py
    git init -q -b main && git add -A && git commit -q -m t0
    CHECK="/usr/bin/python3 -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml tests"
    now_ms() { date +%s%N | awk '{ printf "%.1f", $1 / 1000000 }'; }
    run_once() { # run-id -> "wall_ms baseline_ms cache_hit"
        a=$(now_ms)
        "$BIN" run --json --run-id "$1" --max-iterations 1 --exec true --check "$CHECK" --report out/junit.xml >/dev/null || true
        b=$(now_ms)
        line=$(grep '"type":"check_baseline"' ".loopexec/runs/$1/receipt.jsonl")
        hit=$(echo "$line" | sed -n 's/.*"cache_hit":\(true\|false\).*/\1/p')
        dur=$(echo "$line" | sed -n 's/.*"duration_ms":\([0-9]*\).*/\1/p' | head -1)
        echo "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", b - a }') ${dur:-0} $hit"
    }
    med() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    : > "$ROOT/cold" && : > "$ROOT/hit"
    for i in $(seq "$ROUNDS"); do
        echo "$i" > bench-round && git add bench-round && git commit -q -m "round $i"
        cold=$(run_once "cold$i"); hit=$(run_once "hit$i")
        [ "$(echo "$cold" | cut -d' ' -f3)" = false ] || { echo "round $i: the first run was not cold" >&2; exit 1; }
        [ "$(echo "$hit" | cut -d' ' -f3)" = true ] || { echo "round $i: the second run was no cache hit" >&2; exit 1; }
        echo "$cold" >> "$ROOT/cold" && echo "$hit" >> "$ROOT/hit"
    done
    cw=$(cut -d' ' -f1 "$ROOT/cold" | med); hw=$(cut -d' ' -f1 "$ROOT/hit" | med)
    cb=$(cut -d' ' -f2 "$ROOT/cold" | med)
    echo "cold baseline: run $cw ms (baseline check $cb ms), median of $ROUNDS"
    echo "cache hit    : run $hw ms, median of $ROUNDS"
    echo "ratio cold / hit (whole run): $(awk -v a="$cw" -v b="$hw" 'BEGIN { if (b <= 0) b = 0.001; printf "%.2f", a / b }')x"
    cd / && rm -rf "$ROOT"
    exit 0
fi
FILES=${1:-100000}
ROUNDS=${2:-7}
BENCH_DIR=${BENCH_DIR:-/tmp}
ROOT="$BENCH_DIR/loopexec-bench-guards"
REPO="$ROOT/repo-$FILES"
. ci/bench-lib.sh


cargo build --release --quiet --example guards_bench
GB=target/release/examples/guards_bench

mkdir -p "$ROOT"
chmod 0711 "$ROOT"
generated_repo "$REPO" "$FILES files" "$FILES" <<'PY'
import os, random, sys
root, files = sys.argv[1], int(sys.argv[2])
rng = random.Random(20261201)
for i in range(files):
    pkg, mod = i // 1000, (i // 100) % 10
    d = os.path.join(root, "pkg%03d" % pkg, "mod%02d" % mod)
    os.makedirs(d, exist_ok=True)
    k = i % 20
    if i % 1000 == 0:
        name, text = "Cargo.toml", '[package]\nname = "pkg%03d"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n' % pkg
    elif i % 1000 == 1:
        name, text = "pyproject.toml", '[project]\nname = "pkg%03d"\nversion = "0.1.0"\ndependencies = []\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n' % pkg
    elif k < 5:
        fns = "".join("def f%d_%d(x):\n    return x * %d + %d\n\n\n" % (i, j, j, rng.randrange(100)) for j in range(rng.randrange(5, 25)))
        name, text = "m%06d.py" % i, '"""Module %d."""\n\n\n' % i + fns
    elif k < 7:
        tests = "".join("def test_f%d():\n    assert %d * 2 == %d\n\n\n" % (j, j, 2 * j) for j in range(rng.randrange(3, 12)))
        name, text = "test_m%06d.py" % i, "import pytest\n\n\n" + tests
    elif k < 9:
        fns = "".join("pub fn f%d(x: u64) -> u64 {\n    x * %d\n}\n\n" % (j, j) for j in range(rng.randrange(5, 20)))
        name, text = "m%06d.rs" % i, fns + "#[cfg(test)]\nmod tests {\n    #[test]\n    fn f1() {\n        assert_eq!(super::f1(2), 2);\n    }\n}\n"
    elif k < 10:
        name, text = "m%06d.js" % i, "".join("export function f%d(x) {\n  return x * %d;\n}\n\n" % (j, j) for j in range(rng.randrange(5, 20)))
    else:
        name, text = "n%06d.txt" % i, rng.randbytes(rng.randrange(200, 2000)).hex() + "\n"
    with open(os.path.join(d, name), "w") as f:
        f.write(text)
PY
echo "repository: $(git -C "$REPO" ls-files | wc -l) files, $(du -sm --exclude=.git "$REPO" | cut -f1) MB of files"

# The agent's 10 changes, made in the repository's working tree (the example copies them into
# the workspace's upper layer); undone at the end.
git -C "$REPO" checkout -q -- . && git -C "$REPO" clean -fdq
changed=""
for i in 000002 001003 002004 003022; do
    p=$(cd "$REPO" && ls pkg*/mod*/m$i.py); printf '\ndef added():\n    return 1\n' >> "$REPO/$p"; changed="$changed $p"
done
for i in 004005 005006; do
    p=$(cd "$REPO" && ls pkg*/mod*/test_m$i.py); printf '\ndef test_added():\n    assert 1 + 1 == 2\n' >> "$REPO/$p"; changed="$changed $p"
done
for n in new_one new_two; do
    p=pkg007/mod03/$n.py; printf 'def %s():\n    return 2\n' "$n" > "$REPO/$p"; changed="$changed $p"
done
p=$(cd "$REPO" && ls pkg*/mod*/m008007.rs); printf '\npub fn added() -> u64 {\n    1\n}\n' >> "$REPO/$p"; changed="$changed $p"
p=pkg009/mod00/Cargo.toml; printf 'serde = "1"\n' >> "$REPO/$p"; changed="$changed $p"
git -C "$REPO" status --porcelain >/dev/null

STATE="$ROOT/state"
RUN="$ROOT/run"
rm -rf "$STATE" "$RUN"
mkdir -p "$STATE" "$RUN"
chmod 0711 "$STATE" "$RUN"
# shellcheck disable=SC2086
out=$("$GB" "$REPO" "$STATE" "$RUN" "$ROUNDS" $changed)
git -C "$REPO" checkout -q -- . && git -C "$REPO" clean -fdq
rm -rf "$STATE" "$RUN"

guards=$(echo "$out" | field guards_ms)
snap=$(echo "$out" | field snapshot_ms)
git_ms=$(echo "$out" | field git_status_ms)
both=$(awk -v a="$guards" -v b="$snap" 'BEGIN { printf "%.1f", a + b }')
echo "changed paths in the snapshot : $(echo "$out" | field changes | cut -d. -f1) of $(echo "$out" | field entries | cut -d. -f1) entries"
echo "t0 facts (once per run)       : $(echo "$out" | field t0_facts_ms) ms (A0 = $(echo "$out" | field assertions_t0 | cut -d. -f1))"
echo "snapshot (median of $ROUNDS)       : $snap ms"
echo "guards (median of $ROUNDS)         : $guards ms (of which awareness $(echo "$out" | field awareness_ms) ms)"
echo "git status (median of $ROUNDS)     : $git_ms ms"
echo "ratio guards / git status            : $(ratio "$guards" "$git_ms")x (target <= 1.5x)"
echo "ratio (snapshot + guards) / git status : $(ratio "$both" "$git_ms")x"
