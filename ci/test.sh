#!/usr/bin/env bash
# The test suite. Every test runs as the current user; as root (as in CI) the sandbox, escape and
# workspace suites then run again as the unprivileged user `loopexec-test`, because operators run
# loopexec unprivileged.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh
cargo test --workspace --no-fail-fast 2>&1
if [ "$(id -u)" = 0 ]; then
  echo "== the sandbox suites again, as the unprivileged user loopexec-test" >&2
  LOOPEXEC_TESTS='sandbox_*' sh ci/test-unprivileged.sh
fi
