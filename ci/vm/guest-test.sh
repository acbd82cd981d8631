#!/bin/bash
# The VM matrix, inside the Debian 12 guest (pure cgroup v2, systemd 252), run as root by the
# guest's loopexec-vm-test.service with the freshly built binary on the 9p share. Every row runs
# doctor, `loopexec sandbox` and the bundled example loop in one way an operator starts loopexec:
#   root-service   as root from a system service (this unit: its cgroup has no cpu controller and
#                  holds this script too)
#   root-ssh       as root in a login session (ssh to the VM's own loopback)
#   user-ssh       as the unprivileged vmuser in a login session over ssh
#   user-runuser   as vmuser in a `runuser -l` session
# then: two concurrent unprivileged runs in one login session get a delegated scope each; zone
# limits read and enforced (root and vmuser); a launch refused under cgroup_delegation = "inherit"
# in a login session agrees with doctor and leaves no empty cgroup behind.
# Prints a "SUMMARY" block; exit 0 when every line is ok.
set -u
share=/mnt/loopexec
# Everything appends to the log: the rows' output reaches it through `tee -a /dev/stderr` too.
exec >> "$share/guest.log" 2>&1
root=/opt/loopexec
rm -rf "$root" && mkdir -p "$root" && cp -R "$share/stage/." "$root/" && chmod -R a+rX "$root"
user=vmuser
ssh_as() { local who=$1; shift; ssh -o ConnectTimeout=20 "$who@127.0.0.1" "$@"; }
results=()
# A result line, kept for the SUMMARY (rows run through `tee` have printed theirs already).
note() { results+=("$1"); case "$1" in ROW*) ;; *) echo "$1" ;; esac; }

echo "== guest: $(uname -r), systemd $(systemctl --version | head -1 | cut -d' ' -f2), cgroup fs $(stat -fc %T /sys/fs/cgroup)"
for _ in $(seq 1 60); do systemctl is-active --quiet ssh && break; sleep 1; done

note "$(bash $root/ci/vm/row.sh root-service 2>&1 | tee -a /dev/stderr | grep '^ROW' || echo 'ROW root-service FAIL no output')"
note "$(ssh_as root bash $root/ci/vm/row.sh root-ssh 2>&1 | tee -a /dev/stderr | grep '^ROW' || echo 'ROW root-ssh FAIL no output')"
note "$(ssh_as $user bash $root/ci/vm/row.sh user-ssh 2>&1 | tee -a /dev/stderr | grep '^ROW' || echo 'ROW user-ssh FAIL no output')"
note "$(runuser -l $user -c "bash $root/ci/vm/row.sh user-runuser" 2>&1 | tee -a /dev/stderr | grep '^ROW' || echo 'ROW user-runuser FAIL no output')"

# Two concurrent unprivileged runs in one login session: each its own delegated scope.
concurrent=$(ssh_as $user bash -s <<'SH'
bin=/opt/loopexec/loopexec
d=$(mktemp -d)
"$bin" --json sandbox -- /bin/sh -c 'sleep 2' > "$d/a" 2>/dev/null & a=$!
"$bin" --json sandbox -- /bin/sh -c 'sleep 2' > "$d/b" 2>/dev/null & b=$!
wait $a; ra=$?; wait $b; rb=$?
python3 - "$d/a" "$d/b" "$ra" "$rb" <<'PY'
import json, sys
units = [(json.load(open(f)).get("cgroup_scope") or {}).get("unit") for f in sys.argv[1:3]]
ok = sys.argv[3] == sys.argv[4] == "0" and all(units) and units[0] != units[1]
print("CONCURRENT %s session=%s scopes=%s,%s" % ("ok" if ok else "FAIL", open("/proc/self/cgroup").read().strip().split("/")[-1], units[0], units[1]))
PY
SH
)
note "${concurrent:-CONCURRENT FAIL no output}"

# Zone limits, as root (system manager's scope) and as vmuser (user manager's scope).
while read -r line; do note "$line (root)"; done < <(ssh_as root bash $root/ci/vm/limits.sh 2>&1 | grep '^LIMIT')
while read -r line; do note "$line (vmuser)"; done < <(ssh_as $user bash $root/ci/vm/limits.sh 2>&1 | grep '^LIMIT')

# A refused launch: cgroup_delegation = "inherit" in a login session (the session scope is not
# delegated to vmuser): doctor and sandbox agree on the refusal, and no cgroup is left behind.
refusal=$(ssh_as $user bash -s <<'SH'
d=$(mktemp -d)
printf '[layers]\ncgroup_delegation = "inherit"\n' > "$d/inherit.toml"
bash /opt/loopexec/ci/vm/row.sh user-inherit "$d/inherit.toml" 2>/dev/null | grep '^ROW'
cg=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)
left=$(find "$(dirname "$cg")" -maxdepth 2 -name 'loopexec-*' 2>/dev/null | wc -l)
echo "NO-LEFTOVER $([ "$left" = 0 ] && echo ok || echo FAIL) loopexec cgroups beside the session: $left"
SH
)
while read -r line; do note "$line"; done <<< "${refusal:-ROW user-inherit FAIL no output}"
# as root in a session: the scope holds the shell (EBUSY before), a refusal leaves nothing behind
refusal=$(ssh_as root bash -s <<'SH'
d=$(mktemp -d)
printf '[layers]\ncgroup_delegation = "inherit"\n' > "$d/inherit.toml"
bash /opt/loopexec/ci/vm/row.sh root-inherit "$d/inherit.toml" 2>/dev/null | grep '^ROW'
cg=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)
left=$(find "$cg" -maxdepth 1 -name 'loopexec-*' 2>/dev/null | wc -l)
echo "NO-LEFTOVER $([ "$left" = 0 ] && echo ok || echo FAIL) loopexec cgroups in the root session scope: $left"
SH
)
while read -r line; do note "$line"; done <<< "${refusal:-ROW root-inherit FAIL no output}"

echo "SUMMARY"
fail=0
for r in "${results[@]}"; do
  echo "  $r"
  # "ROW name ok ...", "LIMIT what ok ...", "CONCURRENT ok ...", "NO-LEFTOVER ok ..."
  read -r _ second third _ <<< "$r"
  [ "$second" = ok ] || [ "$third" = ok ] || fail=1
done
echo "SUMMARY $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
