#!/usr/bin/env bash
# Prepares a Debian machine (with rustup) to build loopexec, run its example and run its tests.
# Idempotent. As root it installs the Debian packages the tests need and creates the unprivileged
# test user; as another user it checks they are there and says what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(gcc libc6-dev python3 git openssl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust with rustup first" >&2
  exit 1
fi

if [ "$(id -u)" = 0 ] && [ -x ci/setup-test-user.sh ]; then
  ci/setup-test-user.sh >/dev/null
fi

cargo build --quiet --bin loopexec
