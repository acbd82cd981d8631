# Shared by the benchmarks that measure loopexec against git on a large generated repository
# (ci/bench-guards.sh, ci/bench-workspace.sh): a deterministic git identity and date, the number
# helpers their reports use, and the generated repository itself, cached behind a marker file.
# Sourced, never run.

export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.com GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.com
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z

# ratio A B: A / B with two decimals (B of 0 counts as 0.001).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) b = 0.001; printf "%.2f", a / b }'; }
# field NAME: the number after "NAME": in the JSON on stdin, one decimal.
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | awk '{ printf "%.1f", $1 }'; }

# generated_repo REPO DESCRIPTION [ARGS...] <<'PY' ... PY
# Unless REPO/.generated exists, runs the Python generator read from stdin with REPO and ARGS as
# its arguments, then commits the whole tree as one commit (the marker is excluded from git).
generated_repo() {
    repo=$1 description=$2
    shift 2
    if [ -f "$repo/.generated" ]; then
        cat >/dev/null
        return 0
    fi
    echo "generating $description in $repo (deterministic; takes a while)..."
    rm -rf "$repo"
    mkdir -p "$repo"
    python3 - "$repo" "$@"
    git -C "$repo" init -q -b main
    git -C "$repo" add -A
    git -C "$repo" commit -q -m "generated"
    touch "$repo/.generated"
    echo ".generated" > "$repo/.git/info/exclude"
}
