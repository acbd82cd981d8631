#!/bin/sh
# What the defenses at a green cost (issue 18, "Must show"): an honest fix converging on two real
# suites, more-itertools 10.5.0 (664 tests, Debian's pytest, a JUnit report) and strsim 0.11.1
# (107 inline, integration and doc tests, Debian's cargo), each with one injected bug the scripted
# agent reverts, run side by side in each round with the defenses at a green switched off
# (`adequacy = "off"` and `[sentinel] enabled = false`, the plain arm) and as they are by default
# (the default arm: the sentinel run and the adequacy canary). Prints the median wall time of each
# arm per project, the ratio default / plain, the added seconds per green, and the sentinel run's
# and the canary's own durations (their `guard_sentinel` and `adequacy` events).
# (ci/bench-sentinel.sh measures the sentinel run alone, on and off.)
#
# Usage: ci/bench-green.sh [ROUNDS]   (default 3); BENCH_DIR (/tmp). Needs ci/setup.sh's
# packages and ci/fetch-test-projects.sh's cache (it runs it when an archive is missing).
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
ROOT="${BENCH_DIR:-/tmp}/loopexec-bench-green"
CACHE=${LOOPEXEC_TEST_PROJECTS:-/var/cache/loopexec-test-projects}
MI="$CACHE/more-itertools-10.5.0-5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6.tar.gz"
SS="$CACHE/strsim-0.11.1-7da8b5736845d9f2fcb837ea5d9e2628564b3b043a70948a3f0b778838c5fb4f.crate"
{ [ -f "$MI" ] && [ -f "$SS" ]; } || ci/fetch-test-projects.sh
cargo build --quiet --bin loopexec --bin loopexec-zone-init
BIN="$PWD/target/debug/loopexec"
. ci/bench-env.sh
now_ms() { date +%s%N | awk '{ printf "%.1f", $1 / 1000000 }'; }

# project ARCHIVE DIR FILE FROM TO: unpack, inject the bug (FROM -> TO in FILE), commit t0.
project() {
    mkdir -p "$2" && chmod 0755 "$2"
    tar -xzf "$1" -C "$2" --strip-components=1 --no-same-owner
    python3 - "$2/$3" "$4" "$5" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
assert text.count(old) == 1, f"the bug's site must occur once in {path}"
open(path, "w").write(text.replace(old, new))
PY
    (cd "$2" && git init -q -b main && git add -A && git commit -q -m t0)
}

# arm NAME REPO LOOP_TOML AGENT CHECK [ARGS...]: one run, prints "wall_ms canary_ms sentinel_ms halt".
arm() {
    name=$1 repo=$2 toml=$3 agent=$4 check=$5
    shift 5
    printf '%s' "$toml" > "$repo/loop.toml"
    (cd "$repo" && git add loop.toml && git commit -q -m "loop.toml: $name" --allow-empty)
    a=$(now_ms)
    out=$(cd "$repo" && "$BIN" run --json --run-id "$name" --max-iterations 2 --exec "$agent" --check "$check" "$@" || true)
    b=$(now_ms)
    halt=$(echo "$out" | sed -n 's/.*"halt_reason":"\([a-z_]*\)".*/\1/p')
    spent=$(python3 -c 'import json, sys
ms = {"adequacy": 0, "guard_sentinel": 0}
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("type") in ms:
        ms[e["type"]] = e.get("duration_ms") or 0
print(ms["adequacy"], ms["guard_sentinel"])' "$repo/.loopexec/runs/$name/receipt.jsonl")
    echo "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", b - a }') $spent $halt"
}

# bench LABEL ARCHIVE FILE FROM TO AGENT CHECK [ARGS...]
bench() {
    label=$1 archive=$2 file=$3 from=$4 to=$5 agent=$6 check=$7
    shift 7
    : > "$ROOT/$label.plain" && : > "$ROOT/$label.default"
    for i in $(seq "$ROUNDS"); do
        for which in plain default; do
            repo="$ROOT/$label-$which-$i"
            project "$archive" "$repo" "$file" "$from" "$to"
            toml=""
            [ "$which" = plain ] && toml='adequacy = "off"

[sentinel]
enabled = false
reason = "the plain arm of ci/bench-green.sh"
'
            line=$(arm "$which$i" "$repo" "$toml" "$agent" "$check" "$@")
            [ "$(echo "$line" | cut -d' ' -f4)" = success_condition_met ] || { echo "$label $which round $i did not converge: $line" >&2; exit 1; }
            echo "$line" >> "$ROOT/$label.$which"
            rm -rf "$repo"
        done
    done
    p=$(cut -d' ' -f1 "$ROOT/$label.plain" | med); d=$(cut -d' ' -f1 "$ROOT/$label.default" | med)
    c=$(cut -d' ' -f2 "$ROOT/$label.default" | med); t=$(cut -d' ' -f3 "$ROOT/$label.default" | med)
    echo "$label: plain $p ms, default $d ms (sentinel run $t ms, canary $c ms), median of $ROUNDS"
    echo "$label: ratio default / plain $(awk -v a="$d" -v b="$p" 'BEGIN { if (b <= 0) b = 0.001; printf "%.2f", a / b }')x, added per green $(awk -v a="$d" -v b="$p" 'BEGIN { printf "%.1f", (a - b) / 1000 }') s"
}

bench more-itertools "$MI" more_itertools/recipes.py "    return sum(map(pred, iterable))
" "    return sum(map(pred, iterable)) - 1
" "sed -i 's/    return sum(map(pred, iterable)) - 1\$/    return sum(map(pred, iterable))/' more_itertools/recipes.py" \
    "/usr/bin/python3 -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml tests" --report out/junit.xml
bench strsim "$SS" src/lib.rs "                    count += 1;
" "                    count += 2;
" "sed -i 's/                    count += 2;/                    count += 1;/' src/lib.rs" "cargo test --offline"
cd / && rm -rf "$ROOT"
