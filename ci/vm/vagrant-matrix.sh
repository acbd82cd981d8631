#!/bin/bash
# The VM matrix (ci/vm/guest-test.sh) inside the Vagrant box, which the Vagrantfile provisions
# with ci/vm/packages.list and ci/vm/provision.sh as build-image.sh provisions the qemu image:
# stages the built binary, the example and the scripts the way ci/vm/run.sh stages its 9p share.
#   sudo ci/vm/vagrant-matrix.sh   (in /vagrant, after `cargo build`)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "vagrant-matrix: run as root" >&2; exit 2; }
share=/mnt/loopexec
rm -rf "$share" && mkdir -p "$share/stage/ci/vm" "$share/stage/examples"
cp target/debug/loopexec target/debug/loopexec-zone-init "$share/stage/"
cp ci/demo.sh "$share/stage/ci/"
cp ci/vm/row.sh ci/vm/limits.sh "$share/stage/ci/vm/"
cp -R examples/fizzbuzz "$share/stage/examples/"
# As a transient service, so that the root-service row really is one (as under qemu).
exec systemd-run --quiet --wait --pipe --collect --unit=loopexec-vm-test bash "$PWD/ci/vm/guest-test.sh"
