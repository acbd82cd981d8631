#!/usr/bin/env bash
# The test suite. Every test runs as the current user; as root (as in CI) every integration test
# binary then runs again as the unprivileged user `loopexec-test` (inside a cgroup delegated to
# it), because operators run loopexec unprivileged; the library-only targets of
# ci/user-independent-tests.txt are not run twice. As root, the container engines the
# container-backend tests drive (podman with a private store, a private dockerd) are prepared
# first by ci/container-engines.sh and taken down at the end.
# Each phase prints its wall time (`== phase: N s`), and a summary of them all at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
timings=()
phase() {
  local name=$1 start status=0
  shift
  start=$(date +%s)
  "$@" || status=$?
  timings+=("$name: $(( $(date +%s) - start )) s")
  echo "== $name: $(( $(date +%s) - start )) s" >&2
  return $status
}
summary() { printf '== timings\n' >&2; printf '   %s\n' "${timings[@]}" >&2; }
phase setup ci/setup.sh
if [ "$(id -u)" = 0 ]; then
  engines="${TMPDIR:-/tmp}/loopexec-engines-$$"
  trap 'ci/container-engines.sh stop "$engines"; summary' EXIT
  phase container-engines ci/container-engines.sh start "$engines"
  # shellcheck disable=SC1091
  . "$engines/env"
else
  trap summary EXIT
fi
phase "cargo test (as $(id -un))" cargo test --workspace --no-fail-fast 2>&1
if [ "$(id -u)" = 0 ]; then
  echo "== every integration test again, as the unprivileged user loopexec-test" >&2
  phase "integration tests as loopexec-test" env LOOPEXEC_TESTS='*' sh ci/test-unprivileged.sh
fi
