#!/bin/sh
# The sentinel run's added time per green (issue 18 item 2; docs/guards.md, "The sentinel run") on
# the real suites of tests/loop_real_projects.rs: more-itertools 10.5.0 (pytest, 664 tests) and
# strsim 0.11.1 (cargo test: inline, integration and doc tests), each with its injected bug and the
# honest agent that fixes it (one iteration, then the green). Per project, ROUNDS rounds (default
# 3) alternate a run with the sentinel on (the default) and one with it off (`[sentinel] enabled =
# false` in loop.toml), each on a fresh copy, side by side; printed are the medians of the whole
# run's wall time with and without the sentinel and their ratio, and the sentinel run's own time
# (`guard_sentinel.duration_ms`) against the green check's (`check_result.duration_ms`). No
# assertion: this prints, CI reads.
#
#   ci/bench-sentinel.sh [LOOPEXEC]     (default: target/release/loopexec, built if missing)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/target/release/loopexec}
[ -x "$bin" ] || (cd "$here" && cargo build --release -q --bin loopexec --bin loopexec-zone-init)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
rounds=${ROUNDS:-3}
cache=${LOOPEXEC_TEST_PROJECTS:-/var/cache/loopexec-test-projects}
py=/usr/bin/python3
$py -c 'import pytest' 2>/dev/null || { echo "bench-sentinel: /usr/bin/python3 with pytest is needed (ci/setup.sh installs python3-pytest)" >&2; exit 1; }
[ -x /usr/bin/cargo ] || { echo "bench-sentinel: Debian's cargo in /usr/bin is needed (ci/setup.sh installs it)" >&2; exit 1; }
mi=$cache/more-itertools-10.5.0-5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6.tar.gz
ss=$cache/strsim-0.11.1-7da8b5736845d9f2fcb837ea5d9e2628564b3b043a70948a3f0b778838c5fb4f.crate
[ -f "$mi" ] && [ -f "$ss" ] || "$here/ci/fetch-test-projects.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# As root the zones run as an unprivileged uid, which must pass through to the workspace layers.
chmod 0711 "$work"
"$bin" keygen --dir "$work/keys" >/dev/null

# template NAME ARCHIVE FILE FROM TO: the project unpacked with its bug, committed as t0.
template() {
    dir=$work/$1
    mkdir -p "$dir"
    tar -xzf "$2" -C "$dir" --strip-components=1 --no-same-owner
    $py - "$dir/$3" "$4" "$5" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].encode().decode("unicode_escape"), sys.argv[3].encode().decode("unicode_escape")
text = open(path).read()
assert text.count(old) == 1, f"the bug's site must occur once in {path}"
open(path, "w").write(text.replace(old, new))
PY
    git -C "$dir" init -q -b main
    git -C "$dir" -c user.name=b -c user.email=b@example.invalid add -A
    git -C "$dir" -c user.name=b -c user.email=b@example.invalid commit -q -m t0
}

now() { date +%s.%N; }

# one NAME MODE ROUND AGENT CHECK [ARGS...]: one run on a fresh copy; prints "wall check sentinel"
# (seconds; sentinel 0 when off).
one() {
    name=$1 mode=$2 round=$3 agent=$4 check=$5
    shift 5
    repo=$work/run-$name-$mode-$round
    cp -a "$work/$name" "$repo"
    if [ "$mode" = off ]; then
        printf '[sentinel]\nenabled = false\nreason = "bench-sentinel: the baseline side"\n' > "$repo/loop.toml"
    fi
    start=$(now)
    (cd "$repo" && LOOPEXEC_CONFIG_DIR=$work/keys "$bin" run --json --run-id b --no-baseline --exec "$agent" --check "$check" --max-iterations 2 "$@" >"$repo.out") || true
    end=$(now)
    $py - "$repo/.loopexec/runs/b/receipt.jsonl" "$start" "$end" "$mode" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
halt = [e for e in events if e["type"] == "halt"][-1]
assert halt["halt_reason"] == "success_condition_met", halt
check = [e for e in events if e["type"] == "check_result"][-1]["duration_ms"] / 1000
sentinel = [e for e in events if e["type"] == "guard_sentinel"]
assert len(sentinel) == 1, sentinel
if sys.argv[4] == "on":
    assert sentinel[0]["active"] and sentinel[0]["holds"], sentinel
ran = sentinel[0]["duration_ms"] / 1000 if sentinel[0]["active"] else 0.0
print(f"{float(sys.argv[3]) - float(sys.argv[2]):.3f} {check:.3f} {ran:.3f}")
PY
    rm -rf "$repo"
}

# bench NAME AGENT CHECK [ARGS...]
bench() {
    name=$1 agent=$2 check=$3
    shift 3
    : > "$work/$name.on"
    : > "$work/$name.off"
    i=1
    while [ "$i" -le "$rounds" ]; do
        one "$name" on "$i" "$agent" "$check" "$@" >> "$work/$name.on"
        one "$name" off "$i" "$agent" "$check" "$@" >> "$work/$name.off"
        i=$((i + 1))
    done
    $py - "$name" "$work/$name.on" "$work/$name.off" <<'PY'
import statistics, sys
rows = lambda p: [list(map(float, l.split())) for l in open(p) if l.strip()]
on, off = rows(sys.argv[2]), rows(sys.argv[3])
med = lambda rs, i: statistics.median(r[i] for r in rs)
wall_on, wall_off = med(on, 0), med(off, 0)
check, sentinel = med(on, 1), med(on, 2)
print(f"{sys.argv[1]}: medians of {len(on)} rounds, sentinel on / off side by side")
print(f"  run wall time   on {wall_on:8.2f} s   off {wall_off:8.2f} s   ratio on/off {wall_on / wall_off:.2f}")
print(f"  per green       sentinel run {sentinel:.2f} s   green check {check:.2f} s   ratio sentinel/check {sentinel / check:.2f}")
PY
}

template more-itertools "$mi" more_itertools/recipes.py '    return sum(map(pred, iterable))\n' '    return sum(map(pred, iterable)) - 1\n'
template strsim "$ss" src/lib.rs '                    count += 1;\n' '                    count += 2;\n'
bench more-itertools \
    "sed -i 's/    return sum(map(pred, iterable)) - 1\$/    return sum(map(pred, iterable))/' more_itertools/recipes.py" \
    "/usr/bin/python3 -m pytest -q -p no:cacheprovider --junitxml=out/junit.xml tests" --report out/junit.xml
bench strsim \
    "sed -i 's/                    count += 2;/                    count += 1;/' src/lib.rs" \
    "cargo test --offline"
