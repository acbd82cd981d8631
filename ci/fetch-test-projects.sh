#!/usr/bin/env bash
# Fetches the real open-source projects that tests/loop_real_projects.rs runs end to end, from
# their registries, with the registries' own clients, into a cache the tests read offline:
#
#   more-itertools 10.5.0  PyPI sdist (ships its 663-test unittest/pytest suite)   pip download
#   strsim 0.11.1          crates.io .crate (inline, integration and doc tests)    cargo fetch
#
# Each archive is pinned by SHA-256 and stored as <cache>/<name>-<version>-<sha256>.<ext>; a
# download whose digest differs is refused (nothing is stored). Never vendored into the
# repository. Idempotent: a cached archive with the right digest is not fetched again.
#
# Cache: $LOOPEXEC_TEST_PROJECTS, else /var/cache/loopexec-test-projects (the tests read the same).
# Usage: ci/fetch-test-projects.sh            (called by ci/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${LOOPEXEC_TEST_PROJECTS:-/var/cache/loopexec-test-projects}
# name version sha256 extension; keep in step with tests/loop_real_projects.rs.
PROJECTS=(
  "more-itertools 10.5.0 5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6 tar.gz"
  "strsim 0.11.1 7da8b5736845d9f2fcb837ea5d9e2628564b3b043a70948a3f0b778838c5fb4f crate"
)

mkdir -p "$CACHE"
chmod 0755 "$CACHE"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

fetch_pypi() { # name version dest-dir
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: --dest "$3" "$1==$2"
  ls "$3"/*.tar.gz
}

fetch_crate() { # name version dest-dir
  # A throwaway package depending on exactly NAME=VERSION; `cargo fetch` with a throwaway
  # CARGO_HOME downloads and checksums the .crate against the index.
  local pkg="$3/pkg"
  mkdir -p "$pkg/src"
  printf '[package]\nname = "fetch-test-project"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s = "=%s"\n' "$1" "$2" > "$pkg/Cargo.toml"
  : > "$pkg/src/lib.rs"
  CARGO_HOME="$3/cargo-home" cargo fetch --quiet --manifest-path "$pkg/Cargo.toml"
  ls "$3"/cargo-home/registry/cache/*/"$1-$2.crate"
}

for entry in "${PROJECTS[@]}"; do
  read -r name version sha ext <<<"$entry"
  dest="$CACHE/$name-$version-$sha.$ext"
  if [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$sha" ]; then
    continue
  fi
  work="$scratch/$name"
  mkdir -p "$work"
  case "$ext" in
    crate) got=$(fetch_crate "$name" "$version" "$work") ;;
    *) got=$(fetch_pypi "$name" "$version" "$work") ;;
  esac
  actual=$(sha256sum "$got" | cut -d' ' -f1)
  if [ "$actual" != "$sha" ]; then
    echo "fetch-test-projects: $name $version: sha256 $actual, pinned $sha; refusing it" >&2
    exit 1
  fi
  cp "$got" "$dest.partial"
  chmod 0644 "$dest.partial"
  mv "$dest.partial" "$dest"
  echo "fetch-test-projects: $name $version -> $dest" >&2
done
