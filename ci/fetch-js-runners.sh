#!/usr/bin/env bash
# Installs the JavaScript test runners tests/testreport_tools.rs runs on real projects (vitest,
# jest with jest-junit), from the npm registry with npm's own client, into the test-project
# cache, so the tests run offline and nothing is vendored into the repository:
#
#   tests/fixtures/reports/js-runners/package.json       exact versions
#   tests/fixtures/reports/js-runners/package-lock.json  every package's integrity hash
#
# `npm ci` installs exactly the lock and refuses a tarball whose hash differs from it; no
# install script runs (--ignore-scripts). The result is <cache>/js-runners-<sha256 of the lock>/
# (node_modules inside), made read-only for everyone else and moved into place whole, so a
# partial install is never used. Idempotent: an existing directory for the same lock is kept.
#
# Cache: $LOOPEXEC_TEST_PROJECTS, else /var/cache/loopexec-test-projects (the tests read the same).
# Usage: ci/fetch-js-runners.sh            (called by ci/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${LOOPEXEC_TEST_PROJECTS:-/var/cache/loopexec-test-projects}
src=tests/fixtures/reports/js-runners
command -v npm >/dev/null || { echo "fetch-js-runners: npm not found (apt-get install npm)" >&2; exit 1; }
lock_sha=$(sha256sum "$src/package-lock.json" | cut -d' ' -f1)
dest="$CACHE/js-runners-$lock_sha"
if [ -d "$dest/node_modules" ]; then
  exit 0
fi
mkdir -p "$CACHE"
chmod 0755 "$CACHE"
work=$(mktemp -d "$CACHE/.js-runners.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$src/package.json" "$src/package-lock.json" "$work/"
(cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error --cache "$work/.npm-cache" >&2)
rm -rf "$work/.npm-cache"
chmod -R go-w,a+rX "$work"
mv "$work" "$dest"
trap - EXIT
echo "fetch-js-runners: vitest and jest -> $dest" >&2
