#!/bin/bash
# One row of the VM matrix, run in the context it names (a service, a login session over ssh, a
# `runuser -l` session): doctor, `loopexec sandbox`, the bundled example loop (ci/demo.sh), each
# expected to succeed, and doctor's verdict expected to equal the launches' outcome.
#   row.sh NAME [POLICY]   prints "ROW NAME ok|FAIL ..." as its last line; exit 0 when ok
# With POLICY (e.g. one with cgroup_delegation = "inherit"), doctor and `sandbox` run under it and
# only their agreement is checked (the row's expectation is given by guest-test.sh).
set -u
name=$1
policy=${2:-}
root=/opt/loopexec
bin=$root/loopexec
# A system service has no $HOME (systemd sets it only with User=); the example keeps the operator
# key pair in $HOME/.config/loopexec, so give it root's home as a unit's Environment= would.
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
log=$(mktemp -d "${TMPDIR:-/tmp}/row-$name.XXXXXX")
cd "$log"
echo "== row $name: uid $(id -u), cgroup $(cut -d: -f3 /proc/self/cgroup)" >&2
popt=()
[ -n "$policy" ] && popt=(--policy "$policy")

"$bin" --json doctor "${popt[@]}" > doctor.json 2> doctor.err
doctor_rc=$?
"$bin" doctor "${popt[@]}" >&2 || true
satisfiable=$(python3 -c 'import json,sys; print(json.load(open("doctor.json")).get("satisfiable"))' 2>/dev/null)

"$bin" --json sandbox "${popt[@]}" -- /bin/sh -c 'echo zone-ok' > sandbox.json 2> sandbox.err
sandbox_rc=$?
[ $sandbox_rc = 0 ] || cat sandbox.err sandbox.json >&2
scope=$(python3 -c 'import json; s=json.load(open("sandbox.json")).get("cgroup_scope"); print(s["unit"] if s else "-")' 2>/dev/null)

if [ -n "$policy" ]; then
  launch=$([ $sandbox_rc = 0 ] && echo True || echo False)
  verdict=$([ "$satisfiable" = "$launch" ] && echo ok || echo FAIL)
  echo "ROW $name $verdict doctor_rc=$doctor_rc satisfiable=$satisfiable sandbox_rc=$sandbox_rc scope=$scope"
  [ "$verdict" = ok ]
  exit
fi

LOOPEXEC_BIN=$bin bash $root/ci/demo.sh > demo.out 2>&1
demo_rc=$?
[ $demo_rc = 0 ] || tail -20 demo.out >&2
launch=$([ $sandbox_rc = 0 ] && [ $demo_rc = 0 ] && echo True || echo False)
verdict=ok
[ $doctor_rc = 0 ] && [ "$launch" = True ] && [ "$satisfiable" = True ] || verdict=FAIL
echo "ROW $name $verdict doctor_rc=$doctor_rc satisfiable=$satisfiable sandbox_rc=$sandbox_rc demo_rc=$demo_rc scope=$scope"
[ "$verdict" = ok ]
