#!/bin/sh
# Run the sandbox integration tests as the unprivileged user `loopexec-test` (call as root).
# The test binaries are built here as root, then run directly as that user (it cannot use root's
# rustup toolchain), from inside the delegated cgroup ci/setup-test-user.sh creates beneath ours.
# Extra arguments are passed to every test binary (e.g. a test-name filter). LOOPEXEC_TESTS picks
# the integration test targets (a cargo --test pattern, default `sandbox_*`).
set -eu
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test-unprivileged.sh: run as root (it switches to loopexec-test)" >&2; exit 2; }
dirs=$(sh ci/setup-test-user.sh)
cargo build --quiet --bin loopexec --bin loopexec-zone-init
bins=$(cargo test --no-run --quiet --message-format=json --test "${LOOPEXEC_TESTS:-sandbox_*}" \
    | sed -n 's/.*"executable":"\([^"]*\/deps\/[^"]*\)".*/\1/p')
[ -n "$bins" ] || { echo "no integration test binaries match LOOPEXEC_TESTS=${LOOPEXEC_TESTS:-sandbox_*}" >&2; exit 1; }
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
runuser -u loopexec-test -- test -x "$target/debug/loopexec" || {
    echo "loopexec-test cannot reach $target/debug/loopexec: check out the repository where that user can traverse (e.g. not under /root)" >&2
    exit 1
}
# Move this shell (and so the tests) into the delegated cgroup(s); move back on exit.
leave() {
    for d in $dirs; do echo $$ > "$(dirname "$d")/cgroup.procs" 2>/dev/null || true; done
}
trap leave EXIT
for d in $dirs; do echo $$ > "$d/cgroup.procs"; done
# The whole suite skips the targets ci/user-independent-tests.txt lists (library-only: the user
# changes nothing); a target named on its own still runs.
independent=""
[ "${LOOPEXEC_TESTS:-}" = '*' ] && independent=$(grep -v '^#' ci/user-independent-tests.txt | grep -v '^$')
status=0
for b in $bins; do
    name=$(basename "$b" | sed 's/-[0-9a-f]*$//')
    if printf '%s\n' $independent | grep -qx "$name"; then
        echo "== $name: user-independent (ci/user-independent-tests.txt), ran as root only"
        continue
    fi
    echo "== $(basename "$b") as loopexec-test"
    runuser -u loopexec-test -- env -i PATH=/usr/bin:/bin HOME=/tmp TMPDIR=/tmp \
        LOOPEXEC_BIN="$target/debug/loopexec" "$b" --test-threads=2 "$@" || status=1
done
exit $status
