#!/usr/bin/env bash
# Egress proxy benchmark: 1 GiB through a CONNECT tunnel vs the same transfer direct on loopback
# (both directions), and the latency a proxied connection adds (connect + first byte, median of
# 200). Prints numbers and ratios against the targets (ratio >= 0.8, added latency < 1 ms); it
# does not fail on them: timings depend on the machine.
#   LOOPEXEC_BENCH_BYTES=...        transfer size (default 1073741824)
#   LOOPEXEC_BENCH_ROUNDS=...       alternating direct/proxied rounds, best kept (default 3)
#   LOOPEXEC_BENCH_CONNECTIONS=...  latency samples (default 200)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench egress --quiet
