#!/bin/sh
# The adequacy canary's wall time for 20 mutants on a real pytest suite (issue 14 item 5), through
# `loopexec doctor --check` (its adequacy gate), with the mutants' check runs in parallel (--jobs
# = the cores) against the same 20 runs one after another (--jobs 1), side by side. The other gates
# (determinism, hermeticity, side effects) cost the same in both; a run of the same doctor on a
# copy that is no git repository (no adequacy gate) is measured too and subtracted, so the numbers
# printed are the canary's own. No assertion: this prints, CI reads.
#
#   ci/bench-adequacy.sh [LOOPEXEC]     (default: target/release/loopexec, built if missing)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/target/release/loopexec}
[ -x "$bin" ] || (cd "$here" && cargo build --release -q)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
command -v /usr/bin/python3 >/dev/null && /usr/bin/python3 -c 'import pytest' || { echo "bench-adequacy: /usr/bin/python3 with pytest is needed (ci/setup.sh installs python3-pytest)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo=$work/repo
mkdir -p "$repo/shop" "$repo/tests"
cat > "$repo/pyproject.toml" <<'TOML'
[project]
name = "shop"
version = "0.1.0"
[tool.pytest.ini_options]
testpaths = ["tests"]
TOML
: > "$repo/shop/__init__.py"
cat > "$repo/shop/cart.py" <<'PY'
def price(qty, unit):
    if qty <= 0:
        return 0
    total = qty * unit
    if qty >= 10 and unit > 1:
        total = total - qty
    return total


def shipping(total, express):
    if express:
        return 15
    if total > 100:
        return 0
    return 5


def valid_code(code):
    if len(code) != 6:
        return False
    return code.isalnum() and not code.isdigit()
PY
cat > "$repo/tests/test_cart.py" <<'PY'
from shop.cart import price, shipping, valid_code


def test_price():
    assert price(0, 3) == 0
    assert price(2, 3) == 6
    assert price(10, 2) == 10
    assert price(10, 1) == 10


def test_shipping():
    assert shipping(50, True) == 15
    assert shipping(150, False) == 0
    assert shipping(100, False) == 5


def test_codes():
    assert valid_code("abc123")
    assert not valid_code("123456")
    assert not valid_code("abc")
PY
git -C "$repo" init -q -b main
git -C "$repo" -c user.name=b -c user.email=b@example.invalid add -A
git -C "$repo" -c user.name=b -c user.email=b@example.invalid commit -q -m t0
cp -r "$repo" "$work/nogit" && rm -rf "$work/nogit/.git"

check="/usr/bin/python3 -m pytest -q -p no:cacheprovider"
# doctor --check signs its receipt: an operator key for the benchmark.
"$bin" keygen --dir "$work/keys" >/dev/null
cores=$(nproc)
now() { date +%s.%N; }
calc() { /usr/bin/python3 -c "print($1)"; }
doctor() { # dir jobs
    start=$(now)
    (cd "$1" && LOOPEXEC_CONFIG_DIR=$work/keys "$bin" --json doctor --isolation none --check "$check" --runs 2 --mutants 20 --jobs "$2" >"$work/out.json") || true
    calc "$(now) - $start"
}
others=$(doctor "$work/nogit" "$cores")
parallel=$(doctor "$repo" "$cores")
sampled=$(/usr/bin/python3 -c 'import json,sys; g=[g for g in json.load(open(sys.argv[1]))["gates"] if g["gate"]=="adequacy"][0]["evidence"]; print(g["sampled"], "of", g["generated"], "mutants of the", g["scope"] + ",", g["killed"], "killed")' "$work/out.json")
serial=$(doctor "$repo" 1)
others_serial=$(doctor "$work/nogit" 1)
p=$(calc "$parallel - $others")
s=$(calc "$serial - $others_serial")
printf 'adequacy canary on a pytest suite: %s\n' "$sampled"
printf '  --jobs %s (parallel)   %.2f s\n' "$cores" "$p"
printf '  --jobs 1 (one by one)  %.2f s\n' "$s"
printf '  ratio parallel/serial  %.2f\n' "$(calc "$p / $s")"
