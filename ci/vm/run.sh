#!/usr/bin/env bash
# The VM test rig: boots the Debian 12 image of build-image.sh (cached by its package list's
# digest in /var/cache/loopexec-vm, or $LOOPEXEC_VM_CACHE) under qemu, KVM when /dev/kvm is
# usable, software emulation otherwise, with the freshly built loopexec binary, the example and
# the test scripts on a 9p share; the guest's loopexec-vm-test.service runs guest-test.sh (the
# matrix) and powers off. Prints the guest's log, its SUMMARY and the step's timing.
#   ci/vm/run.sh              as root (installs qemu and debootstrap if missing, builds the image once)
#   ci/vm/run.sh --tools-only only install qemu and debootstrap (.ci/run does this first, then builds
#                             the image in the background while the test suite runs)
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
need=()
# qemu-utils with qemu-system-x86, both at the emulator's candidate version (below): a qemu-utils
# from another archive, such as a backport, is otherwise removed to fit the emulator, or, asked
# for by name, refused as a broken hold.
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86 qemu-utils)
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "vm: missing ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "vm: installing ${need[*]}" >&2
  apt-get update -qq
  if [[ " ${need[*]} " == *" qemu-system-x86 "* ]]; then
    v=$(apt-cache policy qemu-system-x86 | awk '$1 == "Candidate:" { print $2 }')
    pinned=()
    for p in "${need[@]}"; do
      case $p in qemu-system-x86 | qemu-utils) pinned+=("$p=$v") ;; *) pinned+=("$p") ;; esac
    done
    need=("${pinned[@]}")
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades "${need[@]}" >/dev/null
fi
for tool in qemu-system-x86_64 qemu-img debootstrap mkfs.ext4; do
  command -v "$tool" >/dev/null || { echo "vm: $tool is still missing after installing ${need[*]:-nothing}" >&2; exit 1; }
done

[ "${1:-}" = --tools-only ] && exit 0

image=$(ci/vm/build-image.sh)
built=$(date +%s)
cargo build --quiet --bin loopexec --bin loopexec-zone-init

work=$(mktemp -d "${TMPDIR:-/tmp}/loopexec-vm.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/share/stage"
mkdir -p "$stage/ci/vm" "$stage/examples"
cp target/debug/loopexec target/debug/loopexec-zone-init "$stage/"
cp ci/demo.sh "$stage/ci/"
cp ci/vm/row.sh ci/vm/limits.sh "$stage/ci/vm/"
cp -R examples/fizzbuzz "$stage/examples/"
cp ci/vm/guest-test.sh "$work/share/guest-test.sh"
qemu-img create -q -f qcow2 -F raw -b "$image/rootfs.img" "$work/disk.qcow2"

# KVM only when it really runs a guest: /dev/kvm can be present yet unusable (nested
# virtualisation that aborts on an MSR or stalls in the boot stub). The probe boots the kernel
# without a root filesystem and waits (at most 30 s) for its panic on the serial console.
accel=(-accel tcg -cpu max)
how="software emulation (tcg)"
if [ -r /dev/kvm ] && [ -w /dev/kvm ] && [ "${LOOPEXEC_VM_NO_KVM:-}" != 1 ]; then
  # (A subshell that does not exec qemu, so that an abort is neither fatal nor reported here.)
  (set +e; timeout 30 qemu-system-x86_64 -accel kvm -cpu host -m 256 -kernel "$image/vmlinuz" \
    -append "console=ttyS0 panic=-1" -display none -serial "file:$work/kvm-probe.log" \
    -monitor none -no-reboot -nic none; exit 0) >/dev/null 2>&1
  if grep -q "Kernel panic" "$work/kvm-probe.log" 2>/dev/null; then
    accel=(-accel kvm -cpu host)
    how="KVM"
  else
    how="software emulation (tcg; /dev/kvm is present but did not boot the probe kernel)"
  fi
fi
echo "vm: booting $image under qemu with $how" >&2
set +e
timeout "${LOOPEXEC_VM_TIMEOUT:-1500}" qemu-system-x86_64 "${accel[@]}" -m 2048 -smp 2 \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 panic=-1" \
  -drive "file=$work/disk.qcow2,if=virtio,format=qcow2" \
  -virtfs "local,path=$work/share,mount_tag=loopexec,security_model=none,id=share" \
  -nic none -display none -serial "file:$work/console.log" -monitor none -no-reboot
qemu_rc=$?
set -e
end=$(date +%s)
echo "== guest log (ci/vm/guest-test.sh)" >&2
cat "$work/share/guest.log" >&2 2>/dev/null || { echo "vm: no guest log; the console said:" >&2; tail -60 "$work/console.log" >&2; }
rc=$(cat "$work/share/rc" 2>/dev/null || echo missing)
echo "== vm timing: image $((built - start))s, boot+matrix $((end - built))s, total $((end - start))s ($how; qemu exit $qemu_rc)" >&2
if [ "$rc" != 0 ]; then
  echo "vm: the matrix failed (guest exit status $rc)" >&2
  exit 1
fi
echo "vm: matrix green" >&2
