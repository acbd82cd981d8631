# ci/bench-env.sh: sourced by the loop benchmarks (bench-green, bench-holds, bench-reports) once
# ROOT and BIN are set: a fresh bench root with its own operator key, a git identity that reads
# no host configuration, and `med` (the median of the numbers on stdin, one per line).
rm -rf "$ROOT" && mkdir -p "$ROOT/keys" && chmod 0711 "$ROOT"
export LOOPEXEC_CONFIG_DIR="$ROOT/keys" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.com GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.com
"$BIN" keygen --dir "$ROOT/keys" >/dev/null
med() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
