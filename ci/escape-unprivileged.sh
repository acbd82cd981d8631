#!/usr/bin/env bash
# Run the escape suite (tests/escape) as an unprivileged user.
#
# Start it as root (CI does). It
#   1. creates the test user (ci/setup-test-user.sh when present, else `useradd`),
#   2. builds the escape test binary as root (cargo test --no-run),
#   3. creates a cgroup beneath the cgroup this script runs in, in every hierarchy it is in
#      (cgroup v1 controllers and/or the v2 unified tree), hands it to the user (delegation) and
#      moves itself into it, so that the zones the tests start can create their own cgroups,
#   4. runs the already-built test binary as the user, with a private writable temp dir,
#   5. moves itself back out and removes what it created.
# Arguments are passed to the test binary (e.g. a test name filter, --test-threads=1).
#
# Environment: LOOPEXEC_TEST_USER (default loopexec-test), CARGO (default cargo).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
user=${LOOPEXEC_TEST_USER:-loopexec-test}
cargo=${CARGO:-cargo}

if [ "$(id -u)" -ne 0 ]; then
    echo "escape-unprivileged.sh: start me as root (I create a user and delegate a cgroup to it)" >&2
    exit 2
fi

# 1. The user.
if [ -x "$repo/ci/setup-test-user.sh" ]; then
    "$repo/ci/setup-test-user.sh"
fi
if ! id "$user" >/dev/null 2>&1; then
    useradd --system --create-home --shell /usr/sbin/nologin "$user"
fi
uid=$(id -u "$user")
gid=$(id -g "$user")

# 2. The test binary, built as root, run as the user.
bin=$(cd "$repo" && "$cargo" test --test escape --no-run --message-format=json 2>/dev/null \
    | grep '"name":"escape"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "escape-unprivileged.sh: could not build the escape test binary" >&2
    exit 1
fi

# 3. A delegated cgroup beneath our own, in every hierarchy the sandbox uses.
cleanup() {
    local i
    for i in "${!created[@]}"; do
        echo $$ > "${origins[$i]}/cgroup.procs" 2>/dev/null || true
    done
    for i in "${!created[@]}"; do
        # children first (zones the tests may have left), then ours
        find "${created[$i]}" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
        rmdir "${created[$i]}" 2>/dev/null || echo "escape-unprivileged.sh: could not remove ${created[$i]}" >&2
    done
    if [ -n "${tmp:-}" ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT

name="loopexec-escape-unpriv-$$"
created=()
origins=()
own_cgroups=$(cat /proc/self/cgroup) # read once: the file changes as we move ourselves
while IFS=: read -r _ ctrls path; do
    case "$ctrls" in
        ""|memory|pids|cpu|cpu,cpuacct|cpuacct,cpu|freezer) ;;
        *) continue ;; # cpuset, devices, blkio, named hierarchies: the sandbox does not use them
    esac
    case "$ctrls" in
        "") mnt=/sys/fs/cgroup/unified; [ -e "$mnt/cgroup.procs" ] || mnt=/sys/fs/cgroup ;;
        name=*) mnt="/sys/fs/cgroup/${ctrls#name=}" ;;
        *) mnt="/sys/fs/cgroup/$ctrls" ;;
    esac
    base="$mnt${path%/}"
    [ -w "$base/cgroup.procs" ] || continue
    dir="$base/$name"
    mkdir "$dir"
    created+=("$dir")
    origins+=("$base")
    if [ -z "$ctrls" ]; then
        # cgroup v2: the zone supervisor moves itself into a leaf and enables controllers for its
        # zones; it needs the subtree files too.
        chown "$uid:$gid" "$dir" "$dir/cgroup.procs" "$dir/cgroup.subtree_control" "$dir/cgroup.threads" 2>/dev/null || true
    else
        chown -R "$uid:$gid" "$dir"
    fi
    echo $$ > "$dir/cgroup.procs"
done <<< "$own_cgroups"


# 4. A private temp dir the user owns; run the suite (one test at a time: exhaustion tests must
#    not overlap, and the harness serializes anyway).
tmp=$(mktemp -d /tmp/loopexec-escape-unpriv.XXXXXX)
chown "$uid:$gid" "$tmp"
chmod 0755 "$tmp"
set +e
home=$(getent passwd "$user" | cut -d: -f6)
runuser -u "$user" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="${home:-/nonexistent}" TMPDIR="$tmp" \
    LOOPEXEC_ESCAPE_TMPDIR="$tmp" "$bin" --test-threads=1 "$@"
status=$?
set -e
exit $status
