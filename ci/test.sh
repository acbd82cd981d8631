#!/usr/bin/env bash
# The test suite. Every test runs as the current user; as root (as in CI) every integration test
# binary then runs again as the unprivileged user `loopexec-test` (inside a cgroup delegated to
# it), because operators run loopexec unprivileged.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh
cargo test --workspace --no-fail-fast 2>&1
if [ "$(id -u)" = 0 ]; then
  echo "== every integration test again, as the unprivileged user loopexec-test" >&2
  LOOPEXEC_TESTS='*' sh ci/test-unprivileged.sh
fi
