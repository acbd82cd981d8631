#!/usr/bin/env bash
# Builds (or finds cached) the Debian 12 test VM image: debootstrap from Debian's mirror with the
# packages of packages.list, provisioned by provision.sh (the same script the Vagrantfile runs),
# plus the VM-only pieces: an fstab, and the unit that runs the test script handed in over 9p and
# powers the machine off. The root filesystem is made with `mkfs.ext4 -d` (no loop mount); the
# kernel and initrd are taken from the tree for qemu's -kernel/-initrd.
#
#   ci/vm/build-image.sh [CACHE_DIR]     # prints the image directory on stdout
#
# Cache: CACHE_DIR (default $LOOPEXEC_VM_CACHE or /var/cache/loopexec-vm)/<digest>/ with rootfs.img,
# vmlinuz, initrd.img; <digest> is the sha256 of packages.list, provision.sh and this script. The
# debootstrapped tree itself is kept as debootstrap-<sha256 of packages.list>.tar, so that changing
# the provisioning does not download the packages again.
# Needs root (debootstrap, chroot, file ownership inside the image).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:-${LOOPEXEC_VM_CACHE:-/var/cache/loopexec-vm}}"
mirror="${LOOPEXEC_VM_MIRROR:-http://deb.debian.org/debian}"
digest=$(cat "$here/packages.list" "$here/provision.sh" "$here/build-image.sh" | sha256sum | cut -c1-16)
out="$cache/$digest"
if [ -f "$out/rootfs.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
  echo "vm image: cached $out" >&2
  echo "$out"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "build-image: building the VM image needs root (debootstrap); no cached image at $out" >&2
  exit 1
fi
# From here on stdout is the image's path alone: what the build's tools print (mkfs.ext4 says
# "Creating regular file" even under -q, provision.sh and apt talk) goes to stderr.
exec 3>&1 1>&2
for tool in debootstrap mkfs.ext4; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool is missing (ci/vm/run.sh installs it)" >&2; exit 1; }
done
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree="$work/tree"
packages=$(grep -v '^#' "$here/packages.list" | grep -v '^$' | paste -sd, -)
base="$cache/debootstrap-$(sha256sum < "$here/packages.list" | cut -c1-16).tar"
if [ ! -f "$base" ]; then
  echo "vm image: debootstrap bookworm ($packages) from $mirror" >&2
  debootstrap --include="$packages" bookworm "$tree" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -30 "$work/debootstrap.log" >&2
    exit 1
  }
  tar -C "$tree" -cf "$base.part" . && mv "$base.part" "$base"
else
  echo "vm image: provisioning the cached debootstrap tree $base" >&2
  mkdir -p "$tree" && tar -C "$tree" -xf "$base"
fi
cp "$here/provision.sh" "$tree/root/provision.sh"
chroot "$tree" /bin/sh /root/provision.sh
rm "$tree/root/provision.sh"

echo loopexec-vm > "$tree/etc/hostname"
printf '127.0.1.1 loopexec-vm\n' >> "$tree/etc/hosts"
printf '/dev/vda / ext4 rw,relatime 0 1\n' > "$tree/etc/fstab"
# The test runner: mounts the 9p share `loopexec` (binary, test script, example), runs
# guest-test.sh, records its exit status there, powers off.
cat > "$tree/etc/systemd/system/loopexec-vm-test.service" <<'UNIT'
[Unit]
Description=loopexec VM test matrix
After=multi-user.target ssh.service
Wants=ssh.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'modprobe 9pnet_virtio; mkdir -p /mnt/loopexec && mount -t 9p -o trans=virtio,version=9p2000.L loopexec /mnt/loopexec && { /bin/bash /mnt/loopexec/guest-test.sh > /mnt/loopexec/guest.log 2>&1; echo $? > /mnt/loopexec/rc; }; sync'
ExecStopPost=/bin/systemctl --no-block poweroff
StandardOutput=journal+console
TimeoutStartSec=30min

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/loopexec-vm-test.service "$tree/etc/systemd/system/multi-user.target.wants/loopexec-vm-test.service"
# No getty or apt timers competing for the machine's few minutes.
rm -f "$tree/etc/systemd/system/getty.target.wants/"* "$tree/etc/systemd/system/timers.target.wants/"*
chroot "$tree" apt-get clean

kernel=$(ls "$tree"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$tree"/boot/initrd.img-* | sort -V | tail -1)
mkdir -p "$work/img"
cp "$kernel" "$work/img/vmlinuz"
cp "$initrd" "$work/img/initrd.img"
chmod 644 "$work/img/vmlinuz" "$work/img/initrd.img"
mkfs.ext4 -q -F -L loopexec-vm -d "$tree" "$work/img/rootfs.img" 3G
rm -rf "$out"
mv "$work/img" "$out"
echo "vm image: built $out" >&2
echo "$out" >&3
