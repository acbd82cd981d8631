"""A scripted stand-in for a coding agent. Each invocation adds the first rule wordcount.py still
lacks just above its "# (next rule)" marker, and stops. It never touches the tests."""
import pathlib

RULES = [
    "word = word.lower()",
    "word = word.strip('.,;:!?-\"()')",
    "if not word:\n            continue",
]
MARKER = "        # (next rule)\n"

source = pathlib.Path("wordcount.py")
text = source.read_text()
missing = [rule for rule in RULES if rule not in text]
if missing:
    source.write_text(text.replace(MARKER, "        " + missing[0] + "\n" + MARKER))
    print("agent: added", missing[0].splitlines()[0])
else:
    print("agent: nothing left to fix")
