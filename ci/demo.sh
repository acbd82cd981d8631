#!/usr/bin/env bash
# The main job on the bundled example: run examples/fizzbuzz (a check that fails until a scripted
# agent fixes fizzbuzz.sh) as a sandboxed loop on a copy, then show its report and verify its
# signed receipt offline. Creates the operator key pair on first use (`loopexec keygen`).
set -euo pipefail
cd "$(dirname "$0")/.."
# LOOPEXEC_BIN: a loopexec binary built elsewhere (the VM test rig, ci/vm/, has no toolchain).
bin="${LOOPEXEC_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --quiet --bin loopexec --bin loopexec-zone-init
  bin="$PWD/target/debug/loopexec"
fi
keys="${LOOPEXEC_CONFIG_DIR:-${XDG_CONFIG_HOME:-$HOME/.config}/loopexec}"
[ -f "$keys/operator.key" ] || "$bin" keygen --dir "$keys"

work=$(mktemp -d "${TMPDIR:-/tmp}/loopexec-example.XXXXXX")
cp -R examples/fizzbuzz/. "$work/"
# The loop runs on a detached workspace of a git repository: commit the example as t0.
git -C "$work" init -q -b main
git -C "$work" add -A
git -C "$work" -c user.name=demo -c user.email=demo@example.invalid commit -q -m "t0: the example"
if [ "$(id -u)" = 0 ]; then
  # As root the zones run as the unprivileged uid 60200 (policies' identity.uid_when_root); it
  # must be able to pass through the directory that holds the workspace layers.
  chmod 711 "$work"
fi

echo "== loopexec run --workdir $work" >&2
set +e
"$bin" run --workdir "$work"
rc=$?
set -e
if [ "$rc" -ne 10 ]; then
  echo "demo: expected success_condition_met (exit 10), got exit $rc" >&2
  exit 1
fi
run_id=$(cat "$work/.loopexec/latest")
echo "== loopexec report $run_id" >&2
"$bin" report "$run_id" --workdir "$work"
echo "== loopexec verify $run_id --pubkey $keys/operator.pub" >&2
"$bin" verify "$run_id" --workdir "$work" --pubkey "$keys/operator.pub"
echo "== the agent's work, delivered as a branch (the checkout itself is untouched)" >&2
git -C "$work" log --oneline -1 "loopexec/$run_id"
git -C "$work" diff --stat main "loopexec/$run_id"
echo "demo: ok (repository $work)" >&2
