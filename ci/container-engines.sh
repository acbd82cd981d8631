#!/usr/bin/env bash
# Prepare (or take down) the container engines the container-backend tests drive, without touching
# the host's own engine state. Call as root.
#
#   ci/container-engines.sh start DIR   install podman, crun, runc, docker.io and busybox-static if
#                                       missing (without starting the host's own docker service);
#                                       give podman a private store and configuration under DIR;
#                                       start a private dockerd (socket, data and pid file under DIR,
#                                       no bridge, no iptables); import the test image, a static
#                                       busybox, into both; write DIR/env (variables for the tests).
#   ci/container-engines.sh stop DIR    stop that dockerd (by its pid file) and remove DIR.
#
# Nothing is pulled: the image is built from the busybox-static package. On hosts whose cgroups
# are hybrid (v1 controllers), podman is pointed at runc, since crun refuses hybrid hierarchies.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=localhost/loopexec-test-busybox:1

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
dir=$2
[ "$(id -u)" = 0 ] || { echo "container-engines.sh: run as root" >&2; exit 2; }

stop() {
  if [ -f "$dir/docker/pid" ]; then
    pid=$(cat "$dir/docker/pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  if [ -d "$dir" ]; then
    # Unmount whatever the engines left mounted beneath DIR, deepest first.
    awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$dir"
  fi
}

start() {
  packages=(podman crun runc docker.io busybox-static)
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "container-engines: installing ${missing[*]}" >&2
    apt-get update -qq
    # docker.io's maintainer scripts would start the host's own dockerd (bridge, iptables): a
    # temporary policy-rc.d keeps services from starting during the install (Debian's mechanism).
    policy=/usr/sbin/policy-rc.d
    own_policy=
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ -z "$own_policy" ] || rm -f "$policy"
  fi
  stop
  mkdir -p "$dir/podman" "$dir/docker" "$dir/image/bin" "$dir/image/tmp" "$dir/image/etc"
  chmod 711 "$dir"

  # podman: a private store (its database included), the runtime that works with this host's
  # cgroups. tmp_dir stays podman's own: moving it makes podman miss conmon's exit files and wait
  # out its 20 s conmon timeout on every container.
  runtime=crun
  [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || runtime=runc
  cat > "$dir/podman/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$dir/podman/root"
runroot = "$dir/podman/run"
EOF
  cat > "$dir/podman/containers.conf" <<EOF
[engine]
runtime = "$runtime"
volume_path = "$dir/podman/volumes"
events_logger = "file"
events_logfile_path = "$dir/podman/events.log"
cgroup_manager = "cgroupfs"
EOF
  export CONTAINERS_STORAGE_CONF="$dir/podman/storage.conf" CONTAINERS_CONF="$dir/podman/containers.conf"

  # docker: a private daemon on its own socket.
  export DOCKER_HOST="unix://$dir/docker/sock"
  dockerd --data-root "$dir/docker/data" --exec-root "$dir/docker/exec" --pidfile "$dir/docker/pid" \
    -H "$DOCKER_HOST" --iptables=false --ip6tables=false --bridge=none \
    > "$dir/docker/log" 2>&1 &
  for _ in $(seq 300); do docker version >/dev/null 2>&1 && break; sleep 0.1; done
  docker version >/dev/null 2>&1 || { echo "container-engines: dockerd did not start:" >&2; tail -20 "$dir/docker/log" >&2; exit 1; }

  # The test image: a static busybox and its applets, nothing else.
  cp /bin/busybox "$dir/image/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$dir/image/bin/$applet"
  done
  tar -C "$dir/image" -c . | podman import --quiet - "$IMAGE" >/dev/null
  tar -C "$dir/image" -c . | docker import - "$IMAGE" >/dev/null

  cat > "$dir/env" <<EOF
export LOOPEXEC_TEST_ENGINES="podman docker"
export LOOPEXEC_TEST_IMAGE="$IMAGE"
export CONTAINERS_STORAGE_CONF="$CONTAINERS_STORAGE_CONF"
export CONTAINERS_CONF="$CONTAINERS_CONF"
export DOCKER_HOST="$DOCKER_HOST"
EOF
  echo "container-engines: podman ($runtime) and dockerd ready under $dir" >&2
}

case "$action" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
