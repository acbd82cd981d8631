#!/bin/sh
# Provisions a Debian 12 system as loopexec's test host: the unprivileged user `vmuser` with
# lingering (its systemd user manager runs without a login), root and `vmuser` reachable by ssh
# on the machine's own loopback with one key pair, the serial console for logs. Idempotent. Runs
# inside the debootstrapped tree (ci/vm/build-image.sh, via chroot) and inside the Vagrant box
# (Vagrantfile): both test hosts are provisioned the same way.
set -eu
export DEBIAN_FRONTEND=noninteractive

id vmuser >/dev/null 2>&1 || useradd --create-home --shell /bin/bash vmuser
# Lingering without logind running (chroot): the marker file is what `loginctl enable-linger` writes.
mkdir -p /var/lib/systemd/linger
touch /var/lib/systemd/linger/vmuser

# One key pair, authorised for root and vmuser: the test script logs in over ssh to 127.0.0.1.
mkdir -p /root/.ssh
[ -f /root/.ssh/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519
for home in /root /home/vmuser; do
  mkdir -p "$home/.ssh"
  cp /root/.ssh/id_ed25519.pub "$home/.ssh/authorized_keys"
  chmod 700 "$home/.ssh"
  chmod 600 "$home/.ssh/authorized_keys"
done
chown -R vmuser:vmuser /home/vmuser/.ssh
printf 'PermitRootLogin prohibit-password\n' > /etc/ssh/sshd_config.d/loopexec-vm.conf
printf 'Host 127.0.0.1 localhost\n  StrictHostKeyChecking accept-new\n  UserKnownHostsFile /root/.ssh/known_hosts\n  BatchMode yes\n' > /root/.ssh/config

# Git identity for the example loop (it commits its example as t0).
for home in /root /home/vmuser; do
  printf '[user]\n\tname = loopexec-vm\n\temail = vm@example.invalid\n' > "$home/.gitconfig"
done
chown vmuser:vmuser /home/vmuser/.gitconfig
