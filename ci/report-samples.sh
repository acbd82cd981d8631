#!/usr/bin/env bash
# Regenerates the real test-report samples under tests/fixtures/reports/ by running the real tools
# on the tiny projects in tests/fixtures/reports/projects/ (each has one test that fails only when
# SAMPLE_FAIL=1, so every tool gives a green and a red sample of the same collected set), and
# records the tool versions in tests/fixtures/reports/VERSIONS. The tools run with a scrubbed
# environment (env -i: PATH, HOME, SAMPLE_FAIL and the tool's own cache variables), so no host
# variable ends up in a sample. Needs pytest (Debian's python3-pytest), cargo, cargo-nextest, go
# (Debian's golang-go), node (>= 20) and perl's prove: ci/setup.sh installs the Debian ones.
# Usage: ci/report-samples.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/tests/fixtures/reports
projects=$out/projects
work=$(mktemp -d /tmp/loopexec-report-samples.XXXXXX)
trap 'rm -rf "$work"' EXIT

need() { command -v "$1" >/dev/null || { echo "report-samples: $1 not found (run ci/setup.sh as root)" >&2; exit 1; }; }
need cargo; need cargo-nextest; need go; need node; need perl; need prove
if command -v pytest-3 >/dev/null; then PYTEST=$(command -v pytest-3)
elif command -v pytest >/dev/null; then PYTEST=$(command -v pytest)
else echo "report-samples: pytest not found (apt-get install python3-pytest)" >&2; exit 1; fi

clean_path="$(dirname "$(command -v cargo)"):/usr/local/bin:/usr/bin:/bin"
# Runs a command in the scrubbed environment; extra VAR=value words come first.
clean() { env -i PATH="$clean_path" HOME="$HOME" LANG=C.UTF-8 "$@"; }
strip_build_noise() { grep -v -E '^ *(Compiling|Finished|Blocking|Downloaded|Locking) ' "$1" >"$2" || true; }

for colour in green red; do
  fail=0; [ "$colour" = red ] && fail=1
  cp -r "$projects/pytest" "$work/pytest-$colour"
  (cd "$work/pytest-$colour" && clean SAMPLE_FAIL=$fail "$PYTEST" -p no:cacheprovider \
      --junitxml="$work/pytest-$colour.xml" >"$out/pytest-$colour.stdout" 2>&1) || true
  cp "$work/pytest-$colour.xml" "$out/pytest-$colour.xml"
done

cp -r "$projects/rust" "$work/rust"
rust_env=(CARGO_TARGET_DIR="$work/rust/target")
[ -n "${RUSTUP_HOME:-}" ] && rust_env+=(RUSTUP_HOME="$RUSTUP_HOME")
[ -n "${CARGO_HOME:-}" ] && rust_env+=(CARGO_HOME="$CARGO_HOME")
(cd "$work/rust" && clean "${rust_env[@]}" cargo test --offline --no-run -q >/dev/null 2>&1)
for colour in green red; do
  fail=0; [ "$colour" = red ] && fail=1
  (cd "$work/rust" && clean "${rust_env[@]}" SAMPLE_FAIL=$fail cargo test --offline --no-fail-fast \
      >"$out/cargo-test-$colour.stdout" 2>"$work/cargo-test-$colour.stderr") || true
  strip_build_noise "$work/cargo-test-$colour.stderr" "$out/cargo-test-$colour.stderr"
  (cd "$work/rust" && clean "${rust_env[@]}" SAMPLE_FAIL=$fail cargo nextest run --offline --no-fail-fast \
      >"$work/nextest-$colour.stdout" 2>"$work/nextest-$colour.stderr") || true
  strip_build_noise "$work/nextest-$colour.stderr" "$out/nextest-$colour.stderr"
  cp "$work/rust/target/nextest/default/junit.xml" "$out/nextest-$colour.xml"
done

cp -r "$projects/go" "$work/go"
go_env=(GOPROXY=off GOFLAGS=-mod=mod GOCACHE="$work/go-cache" GOPATH="$work/go-path" GOTELEMETRY=off)
for colour in green red; do
  fail=0; [ "$colour" = red ] && fail=1
  (cd "$work/go" && clean "${go_env[@]}" SAMPLE_FAIL=$fail go test -count=1 -json ./... \
      >"$out/go-test-json-$colour.jsonl") || true
  (cd "$work/go" && clean "${go_env[@]}" SAMPLE_FAIL=$fail go test -count=1 ./... \
      >"$out/go-test-$colour.stdout") || true
done

cp -r "$projects/node" "$work/node"
for colour in green red; do
  fail=0; [ "$colour" = red ] && fail=1
  (cd "$work/node" && clean SAMPLE_FAIL=$fail node --test --test-reporter=tap >"$out/node-tap-$colour.tap") || true
  # The TAP report to a file and the spec reporter (with its `ℹ tests N` closing lines) on stdout.
  (cd "$work/node" && clean SAMPLE_FAIL=$fail node --test --test-reporter=tap --test-reporter-destination=node.tap \
      --test-reporter=spec --test-reporter-destination=stdout >"$out/node-spec-$colour.stdout") || true
done

cp -r "$projects/perl" "$work/perl"
for colour in green red; do
  fail=0; [ "$colour" = red ] && fail=1
  (cd "$work/perl" && clean SAMPLE_FAIL=$fail perl t/basic.t >"$out/perl-tap-$colour.tap" 2>/dev/null) || true
  (cd "$work/perl" && clean SAMPLE_FAIL=$fail prove t/ >"$out/prove-$colour.stdout" 2>&1) || true
done

# The samples must not carry the temp dir's random name: make them byte-stable across runs.
for f in "$out"/*.xml "$out"/*.stdout "$out"/*.stderr "$out"/*.jsonl "$out"/*.tap; do
  sed -i "s#$work#/tmp/samples#g" "$f"
done

{
  echo "# Tool versions that produced these samples (ci/report-samples.sh)"
  echo "pytest: $(clean "$PYTEST" --version 2>&1 | head -1) ($(head -1 "$PYTEST" | sed 's/^#!//'))"
  echo "cargo: $(cargo --version)"
  echo "rustc: $(rustc --version)"
  echo "cargo-nextest: $(cargo nextest --version | head -1)"
  echo "go: $(go version)"
  echo "node: $(node --version)"
  echo "perl: $(perl -e 'print $^V')"
  echo "prove: $(prove --version)"
} >"$out/VERSIONS"
echo "report-samples: wrote the samples in $out (versions in $out/VERSIONS)"
