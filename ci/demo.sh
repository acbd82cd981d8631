#!/usr/bin/env bash
# The main job on the bundled example: run examples/fizzbuzz (a check that fails until a scripted
# agent fixes fizzbuzz.sh) as a sandboxed loop on a copy, then show its report and verify its
# signed receipt offline. Creates the operator key pair on first use (`loopexec keygen`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bin loopexec
bin="$PWD/target/debug/loopexec"
keys="${LOOPEXEC_CONFIG_DIR:-${XDG_CONFIG_HOME:-$HOME/.config}/loopexec}"
[ -f "$keys/operator.key" ] || "$bin" keygen --dir "$keys"

work=$(mktemp -d "${TMPDIR:-/tmp}/loopexec-example.XXXXXX")
cp -R examples/fizzbuzz/. "$work/"
if [ "$(id -u)" = 0 ]; then
  # As root the zones run as the unprivileged uid 60200 (policies' identity.uid_when_root), so the
  # workdir they write must be theirs. Unprivileged operators need nothing of the sort.
  chown -R 60200:60200 "$work"
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
echo "demo: ok (workdir $work)" >&2
