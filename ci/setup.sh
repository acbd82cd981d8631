#!/usr/bin/env bash
# Prepares a Debian machine (with rustup) to build loopexec, run its example and run its tests.
# Idempotent. As root it installs the Debian packages the tests need and creates the unprivileged
# test user; as another user it checks they are there and says what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-yaml: reads the GitHub Actions example (tests/docs_pages.rs). python3-pytest, golang-go, nodejs (npm: vitest and jest, ci/fetch-js-runners.sh) and perl (prove):
# the real test runners the report parser tests
# run (tests/testreport_tools.rs, ci/report-samples.sh). cargo (Debian's, with its rustc, in
# /usr/bin): the system toolchain a Rust check runs in the exec zone, which binds /usr but nothing
# under /root or /home where rustup keeps its own (tests/loop_real_projects.rs). python3-pytest-cov
# (with python3-coverage): the real lcov and Cobertura reports of the coverage guard's tests
# (tests/loop_coverage.rs).
packages=(gcc libc6-dev python3 python3-yaml git openssl python3-pytest python3-pytest-cov golang-go nodejs perl cargo)
# Debian's npm only where no npm is there yet: a Node.js from another archive (NodeSource's
# nodejs carries its own npm) conflicts with Debian's npm package.
command -v npm >/dev/null 2>&1 || packages+=(npm)
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

# Installed without recommends, each for a test that needs only the program:
# - vagrant with the vagrant-libvirt plugin: `vagrant validate` of the top-level Vagrantfile, its
#   libvirt provider settings checked (tests/vagrantfile.rs); no VM boots. The plugin's
#   recommends are the libvirt daemon and a whole qemu.
# - chromium with fonts-liberation (its page text): tests/report_html.rs renders `report
#   --html`'s page headless and screenshots it. Its recommends bring udev, whose installation
#   re-applies the device rules (it made /dev/net/tun 0666 for every user: a host setting the
#   tests must leave as it was), and avahi, upower, cups helpers.
bare=(vagrant vagrant-libvirt chromium fonts-liberation)
bare_missing=()
for p in "${bare[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || bare_missing+=("$p")
done
if [ ${#bare_missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${bare_missing[*]} (without recommends)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${bare_missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages: ${bare_missing[*]} (run: sudo apt-get install --no-install-recommends ${bare_missing[*]})" >&2
    exit 1
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust with rustup first" >&2
  exit 1
fi

# cargo-nextest: the report parser tests run it for its JUnit report.
if ! cargo nextest --version >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing cargo-nextest" >&2
    cargo install --quiet --locked cargo-nextest
  else
    echo "setup: cargo-nextest missing (run: cargo install --locked cargo-nextest)" >&2
    exit 1
  fi
fi

# The real open-source projects tests/loop_real_projects.rs runs, fetched once into a cache so
# that the tests run offline (pinned by SHA-256; never vendored).
if [ "$(id -u)" = 0 ] || [ -n "${LOOPEXEC_TEST_PROJECTS:-}" ]; then
  ci/fetch-test-projects.sh
  # vitest and jest (with jest-junit) from npm, pinned by the committed package-lock.json.
  ci/fetch-js-runners.sh
fi

if [ "$(id -u)" = 0 ] && [ -x ci/setup-test-user.sh ]; then
  ci/setup-test-user.sh >/dev/null
fi

cargo build --quiet --bin loopexec --bin loopexec-zone-init
