#!/usr/bin/env python3
"""The import graph of the top-level modules of src/ and of the cli commands (docs/architecture.md,
"The import graph").

Lists every `crate::<module>` path in each file of src/, outside comments and outside the
`#[cfg(test)] mod tests` at the end of a file, builds the graph of top-level modules and prints
its circles (pairs of modules that reach each other), the graph (`a -> b`: a uses b) and, for each
edge on a circle, one place that makes it. Then the same for the commands of src/cli/ (each file
of src/cli/ but mod.rs is one command, or a helper the commands share): a command uses another
through `super::<name>` or `crate::cli::<name>`; their circles are printed as `cli cycles: ...`,
with one place for each edge on one. The layering rule is that both lines say `none`.

Usage: ci/module-graph.py [SRC_DIR]   (default src). Exit 0 whatever it finds: the test
tests/module_graph.rs reads the output.
"""
import os, re, sys


def code_lines(path):
    """The file's lines with comments blanked, up to its trailing `#[cfg(test)] mod tests`."""
    lines = open(path, errors="replace").read().split("\n")
    code = []
    for i, l in enumerate(lines):
        if l.startswith("#[cfg(test)]") and i + 1 < len(lines) and lines[i + 1].startswith("mod tests"):
            break
        code.append(re.sub(r"//.*", "", l))
    return code


def grouped(prefix, line):
    """The first name of each path in `PREFIX::{a::x, b, c::{y, z}}` on the line."""
    names = []
    for group in re.findall(prefix + r"::\{([^}]*)", line):
        names += re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group)
    return names


def circles(graph):
    """The pairs (a, b), a < b, of nodes that reach each other."""
    def reach(a, b, seen):
        for n in graph.get(a, ()):
            if n == b or (n not in seen and (seen.add(n) or reach(n, b, seen))):
                return True
        return False
    return sorted({tuple(sorted((a, b))) for a in graph for b in graph.get(a, ()) if reach(b, a, set())})


def show(cyc, prefix):
    print(prefix + "cycles:", ", ".join("%s<->%s" % c for c in cyc) or "none")


def places(cyc, where):
    for (a, b) in sorted(where):
        if any(a in c and b in c for c in cyc):
            print("  ", a, "->", b, where[(a, b)])


src = sys.argv[1] if len(sys.argv) > 1 else "src"
mods, where = {}, {}
cmds, cmd_where = {}, {}
cli_dir = os.path.join(src, "cli")
commands = sorted(f[:-3] for f in os.listdir(cli_dir) if f.endswith(".rs") and f != "mod.rs") if os.path.isdir(cli_dir) else []
for root, _, files in os.walk(src):
    for f in sorted(files):
        if not f.endswith(".rs"):
            continue
        p = os.path.join(root, f)
        rel = os.path.relpath(p, src).split(os.sep)
        top = rel[0][:-3] if len(rel) == 1 else rel[0]
        if top in ("main", "lib"):
            continue
        code = code_lines(p)
        command = f[:-3] if len(rel) == 2 and top == "cli" and f != "mod.rs" else None
        for n, l in enumerate(code):
            # `crate::a::x`, and each `a` of a grouped `use crate::{a::x, b}`.
            for m in re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", l) + grouped(r"\bcrate", l):
                if m != top:
                    mods.setdefault(top, set()).add(m)
                    where.setdefault((top, m), f"{p}:{n+1}")
            if command is None:
                continue
            for m in re.findall(r"(?:\bsuper|\bcrate::cli)::([a-z_][a-z0-9_]*)", l) + grouped(r"(?:\bsuper|\bcrate::cli)", l):
                if m != command and m in commands:
                    cmds.setdefault(command, set()).add(m)
                    cmd_where.setdefault((command, m), f"{p}:{n+1}")
cyc = circles(mods)
cmd_cyc = circles(cmds)
show(cyc, "")
show(cmd_cyc, "cli ")
for k in sorted(mods):
    print("%-11s -> %s" % (k, " ".join(sorted(mods[k]))))
places(cyc, where)
for k in sorted(cmds):
    print("cli::%-16s -> %s" % (k, " ".join(sorted(cmds[k]))))
places(cmd_cyc, cmd_where)
