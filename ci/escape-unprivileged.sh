#!/usr/bin/env bash
# Run the escape suite (tests/escape, test binary `sandbox_escape`) as an unprivileged user.
#
# Start it as root (CI does). It
#   1. prepares the user `loopexec-test` and a cgroup delegated to it beneath the cgroup this script
#      runs in: with ci/setup-test-user.sh when present (its persistent `loopexec-test` cgroups),
#      else itself (per-run cgroups in the v1 memory/pids/cpu/freezer hierarchies and/or v2,
#      removed afterwards),
#   2. builds the escape test binary as root (cargo test --no-run),
#   3. moves itself into the delegated cgroup(s), so that the zones the tests start can create
#      their own cgroups beneath it,
#   4. runs the already-built test binary as the user, with a private writable temp dir,
#   5. moves itself back out and removes what it created.
# Arguments are passed to the test binary (e.g. a test name filter).
# ci/test-unprivileged.sh (which runs every sandbox_* test binary as the user) runs this suite too.
#
# Environment: CARGO (default cargo).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
user=loopexec-test
cargo=${CARGO:-cargo}

if [ "$(id -u)" -ne 0 ]; then
    echo "escape-unprivileged.sh: start me as root (I prepare a user and a delegated cgroup)" >&2
    exit 2
fi

created=()   # cgroups this script made (removed at exit)
joined=()    # cgroups this script moved itself into
origins=()   # where it came from, per joined cgroup
tmp=""
cleanup() {
    local i
    for i in "${!joined[@]}"; do
        echo $$ > "${origins[$i]}/cgroup.procs" 2>/dev/null || true
    done
    for i in "${!created[@]}"; do
        # children first (zones the tests may have left), then ours
        find "${created[$i]}" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
        rmdir "${created[$i]}" 2>/dev/null || echo "escape-unprivileged.sh: could not remove ${created[$i]}" >&2
    done
    if [ -n "$tmp" ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT

# 1. The user and the delegated cgroup(s).
own_cgroups=$(cat /proc/self/cgroup) # read once: the file changes as we move ourselves
origin_of() { # the cgroup directory we are in, in the hierarchy mounted where $1 lives
    local dir=$1 ctrls path mnt
    while IFS=: read -r _ ctrls path; do
        case "$ctrls" in
            "") mnt=/sys/fs/cgroup/unified; [ -e "$mnt/cgroup.procs" ] || mnt=/sys/fs/cgroup ;;
            name=*) mnt="/sys/fs/cgroup/${ctrls#name=}" ;;
            *) mnt="/sys/fs/cgroup/$ctrls" ;;
        esac
        case "$dir" in "$mnt${path%/}/"*) echo "$mnt${path%/}"; return ;; esac
    done <<< "$own_cgroups"
}
dirs=()
if [ -x "$repo/ci/setup-test-user.sh" ] || [ -f "$repo/ci/setup-test-user.sh" ]; then
    while read -r d; do [ -n "$d" ] && dirs+=("$d"); done < <(sh "$repo/ci/setup-test-user.sh")
else
    id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
    name="loopexec-escape-unpriv-$$"
    while IFS=: read -r _ ctrls path; do
        case "$ctrls" in
            ""|memory|pids|cpu|cpu,cpuacct|cpuacct,cpu|freezer) ;;
            *) continue ;; # cpuset, devices, blkio, named hierarchies: the sandbox does not use them
        esac
        case "$ctrls" in
            "") mnt=/sys/fs/cgroup/unified; [ -e "$mnt/cgroup.procs" ] || mnt=/sys/fs/cgroup ;;
            *) mnt="/sys/fs/cgroup/$ctrls" ;;
        esac
        base="$mnt${path%/}"
        [ -w "$base/cgroup.procs" ] || continue
        dir="$base/$name"
        mkdir "$dir"
        created+=("$dir")
        chown "$user" "$dir" "$dir/cgroup.procs"
        for f in cgroup.subtree_control cgroup.threads tasks; do
            [ -e "$dir/$f" ] && chown "$user" "$dir/$f"
        done
        dirs+=("$dir")
    done <<< "$own_cgroups"
fi
uid=$(id -u "$user")

# 2. The test binary, built as root, run as the user.
bin=$(cd "$repo" && "$cargo" test --test sandbox_escape --no-run --message-format=json 2>/dev/null \
    | grep '"name":"sandbox_escape"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "escape-unprivileged.sh: could not build the escape test binary" >&2
    exit 1
fi

# 3. Into the delegated cgroup(s).
for d in "${dirs[@]}"; do
    origins+=("$(origin_of "$d")")
    joined+=("$d")
    echo $$ > "$d/cgroup.procs"
done

# 4. A private temp dir the user owns; run the suite.
tmp=$(mktemp -d /tmp/loopexec-escape-unpriv.XXXXXX)
chown "$uid" "$tmp"
chmod 0755 "$tmp"
set +e
runuser -u "$user" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/nonexistent TMPDIR="$tmp" \
    LOOPEXEC_ESCAPE_TMPDIR="$tmp" "$bin" "$@"
status=$?
set -e
exit $status
