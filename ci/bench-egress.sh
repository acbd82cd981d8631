#!/usr/bin/env bash
# Egress proxy benchmark: 1 GiB through a CONNECT tunnel vs the same transfer direct on loopback
# (both directions), and the latency a proxied connection adds (connect + first byte, median of
# 200). Prints numbers and ratios against the targets (ratio >= 0.8, added latency < 1 ms); it
# does not fail on them: timings depend on the machine.
#   LOOPEXEC_BENCH_BYTES=...        transfer size (default 1073741824)
#   LOOPEXEC_BENCH_ROUNDS=...       alternating direct/proxied rounds, best kept (default 3)
#   LOOPEXEC_BENCH_CONNECTIONS=...  latency samples (default 200)
#   LOOPEXEC_BENCH_BASELINE=DIR     another checkout (e.g. `git worktree add DIR <commit>`): its
#                                   bench runs too, alternating with this one, and both are printed
#                                   side by side, so a change is measured against its baseline in
#                                   the same conditions
#   LOOPEXEC_BENCH_PASSES=N         with a baseline: alternating passes of each (default 2)
# With a baseline, set CARGO_TARGET_DIR to one directory for both: the two checkouts' crates are
# distinct packages there, and the dependencies are built once.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$(pwd)
baseline=${LOOPEXEC_BENCH_BASELINE:-}
if [ -z "$baseline" ]; then
    cargo bench --bench egress --quiet
    exit 0
fi
[ -f "$baseline/benches/egress.rs" ] || { echo "bench-egress: $baseline has no benches/egress.rs" >&2; exit 2; }
passes=${LOOPEXEC_BENCH_PASSES:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Build both first, so that no pass pays for a compile.
(cd "$baseline" && cargo bench --bench egress --no-run --quiet)
cargo bench --bench egress --no-run --quiet
for pass in $(seq 1 "$passes"); do
    (cd "$baseline" && cargo bench --bench egress --quiet) >"$out/baseline.$pass"
    (cd "$here" && cargo bench --bench egress --quiet) >"$out/current.$pass"
done
for pass in $(seq 1 "$passes"); do
    echo "== pass $pass: baseline ($baseline, $(git -C "$baseline" rev-parse --short HEAD))"
    cat "$out/baseline.$pass"
    echo "== pass $pass: this checkout ($(git rev-parse --short HEAD))"
    cat "$out/current.$pass"
done
