#!/bin/sh
# A scripted stand-in for a coding agent. Each invocation adds the next numeral src/lib.rs still
# lacks to its table (V and IV, then IX, then X), in order, and stops. It never touches a test.
set -eu

# $1: the table line to add; $2: the line it goes above.
add_numeral() {
  if grep -qF -- "$1" src/lib.rs; then
    return 1
  fi
  awk -v new="$1" -v above="$2" 'index($0, above) == 1 && !done { print new; done = 1 } { print }' src/lib.rs > src/lib.rs.new
  mv src/lib.rs.new src/lib.rs
  echo "agent: added $1"
}

add_numeral '    (5, "V"), (4, "IV"),' '    (1, "I"),' ||
  add_numeral '    (9, "IX"),' '    (5, "V"),' ||
  add_numeral '    (10, "X"),' '    (9, "IX"),' ||
  echo "agent: nothing left to fix"
