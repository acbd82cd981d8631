#!/bin/sh
# Prepare this host (as root) for running the sandbox tests as an unprivileged user:
#  - the users `loopexec-test` and `loopexec-other` (no home, no password);
#  - a delegated cgroup named `loopexec-test` beneath the cgroup THIS script runs in, owned by
#    that user: one per controller on cgroup v1 (memory, pids, cpu, freezer), one on v2.
# Prints the delegated directories, one per line (ci/test-unprivileged.sh moves itself into them).
# Nothing outside our own cgroup subtree and the user database is changed; idempotent.
set -eu
USER_NAME=loopexec-test
[ "$(id -u)" = 0 ] || { echo "setup-test-user.sh: run as root" >&2; exit 2; }
id "$USER_NAME" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$USER_NAME"
# A second unprivileged local user, for the tests of what other local users can reach
# (tests/loop_workspace.rs: another user writing into a directory the agent left world-writable).
id loopexec-other >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin loopexec-other

if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    base="/sys/fs/cgroup${own%/}"
    dir="$base/loopexec-test"
    # Controllers must be enabled for children of our cgroup (v2 "no internal processes": if our
    # cgroup holds processes, the caller has to run this from a leaf-able scope, e.g. systemd-run).
    for c in memory pids cpu; do
        grep -qw "$c" "$base/cgroup.subtree_control" || echo "+$c" > "$base/cgroup.subtree_control"
    done
    mkdir -p "$dir"
    chown "$USER_NAME" "$dir" "$dir/cgroup.procs" "$dir/cgroup.subtree_control" "$dir/cgroup.threads"
    echo "$dir"
else
    for c in memory pids cpu freezer; do
        [ -d "/sys/fs/cgroup/$c" ] || continue
        own=$(awk -F: -v c="$c" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print $3 }' /proc/self/cgroup)
        dir="/sys/fs/cgroup/$c${own%/}/loopexec-test"
        mkdir -p "$dir"
        chown "$USER_NAME" "$dir" "$dir/cgroup.procs" "$dir/tasks"
        echo "$dir"
    done
fi
