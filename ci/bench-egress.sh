#!/usr/bin/env bash
# Egress proxy benchmark: 1 GiB through a CONNECT tunnel vs the same transfer direct on loopback
# (both directions) and through a bare splice(2) relay (the floor of any relay in user space),
# and the latency a proxied connection adds (connect + first byte, median of 200). Prints the
# numbers, the ratios against the targets (ratio >= 0.8, added latency < 1 ms) and the load
# average; it does not fail on them: timings depend on the machine.
#   LOOPEXEC_BENCH_BYTES=...        transfer size (default 1073741824)
#   LOOPEXEC_BENCH_ROUNDS=...       alternating direct/proxied rounds, best kept (default 3)
#   LOOPEXEC_BENCH_CONNECTIONS=...  latency samples (default 200)
#   LOOPEXEC_BENCH_BASELINE=DIR     another checkout (e.g. `git worktree add DIR <commit>`): its
#                                   bench is built too, the two run alternating, and both are
#                                   printed, so a change is measured against its baseline in the
#                                   same conditions. With CARGO_TARGET_DIR set, both checkouts
#                                   share it (dependencies compiled once; this crate rebuilt from
#                                   each checkout's sources)
#   LOOPEXEC_BENCH_PASSES=N         with a baseline: alternating passes of each (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=${LOOPEXEC_BENCH_BASELINE:-}
if [ -z "$baseline" ]; then
    cargo bench --bench egress --quiet
    exit 0
fi
[ -f "$baseline/benches/egress.rs" ] || { echo "bench-egress: $baseline has no benches/egress.rs" >&2; exit 2; }
passes=${LOOPEXEC_BENCH_PASSES:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Build each once and keep its executable (the two checkouts' artifacts may share names in a
# shared target directory), then run them alternating, so that no pass pays for a compile.
build() { # DIR NAME
    local exe
    # A shared CARGO_TARGET_DIR (so the dependencies are compiled once) holds one build of this
    # crate for both checkouts, under the same names, and cargo would take it as fresh for the
    # other checkout whose files are older: forget it, so each checkout's own sources are built.
    if [ -n "${CARGO_TARGET_DIR:-}" ]; then
        rm -rf "$CARGO_TARGET_DIR"/release/.fingerprint/loopexec-*
    fi
    exe=$(cd "$1" && cargo bench --bench egress --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "egress" and "bench" in m["target"]["kind"]][-1])')
    cp "$exe" "$out/$2"
}
build "$baseline" baseline.bin
build . current.bin
for pass in $(seq 1 "$passes"); do
    "$out/baseline.bin" --bench >"$out/baseline.$pass"
    "$out/current.bin" --bench >"$out/current.$pass"
done
for pass in $(seq 1 "$passes"); do
    echo "== pass $pass: baseline ($baseline, $(git -C "$baseline" rev-parse --short HEAD))"
    cat "$out/baseline.$pass"
    echo "== pass $pass: this checkout ($(git rev-parse --short HEAD))"
    cat "$out/current.$pass"
done
