#!/usr/bin/env python3
"""The import graph of the top-level modules of src/ (docs/architecture.md, "The import graph").

Lists every `crate::<module>` path in each file of src/, outside comments and outside the
`#[cfg(test)] mod tests` at the end of a file, builds the graph of top-level modules and prints
its circles (pairs of modules that reach each other), the graph (`a -> b`: a uses b) and, for each
edge on a circle, one place that makes it. Usage: ci/module-graph.py [SRC_DIR]   (default src).
"""
import os, re, sys
src = sys.argv[1] if len(sys.argv) > 1 else "src"
mods = {}
where = {}
for root, _, files in os.walk(src):
    for f in files:
        if not f.endswith(".rs"): continue
        p = os.path.join(root, f); rel = os.path.relpath(p, src).split(os.sep)
        top = rel[0][:-3] if len(rel) == 1 else rel[0]
        if top in ("main", "lib"): continue
        lines = open(p, errors="replace").read().split("\n")
        code = []
        for i, l in enumerate(lines):
            if l.startswith("#[cfg(test)]") and i + 1 < len(lines) and lines[i + 1].startswith("mod tests"):
                break
            code.append(re.sub(r"//.*", "", l))
        for n, l in enumerate(code):
            for m in re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", l):
                if m != top:
                    mods.setdefault(top, set()).add(m)
                    where.setdefault((top, m), f"{p}:{n+1}")
def reach(a, b, seen):
    for n in mods.get(a, ()):
        if n == b or (n not in seen and (seen.add(n) or reach(n, b, seen))): return True
    return False
cyc = sorted({tuple(sorted((a, b))) for a in mods for b in mods.get(a, ()) if reach(b, a, set())})
print("cycles:", ", ".join("%s<->%s" % c for c in cyc) or "none")
for k in sorted(mods): print("%-11s -> %s" % (k, " ".join(sorted(mods[k]))))
for (a, b) in sorted(where):
    if any(a in c and b in c for c in cyc): print("  ", a, "->", b, where[(a, b)])
