#!/bin/sh
# A scripted stand-in for a coding agent. Each invocation adds the first FizzBuzz rule that
# fizzbuzz.sh still lacks, just before the "# (next rule)" marker, and stops. It never touches the
# check or the expected output.
set -eu

add_rule() {
  # $1: the rule's code line (also how we recognise it is already there)
  if grep -qF -- "$1" fizzbuzz.sh; then
    return 1
  fi
  {
    sed '/# (next rule)/,$d' fizzbuzz.sh
    printf '  %s\n' "$1"
    sed -n '/# (next rule)/,$p' fizzbuzz.sh
  } > fizzbuzz.sh.new
  mv fizzbuzz.sh.new fizzbuzz.sh
  echo "agent: added rule: $1"
  return 0
}

add_rule '[ $((i % 3)) -eq 0 ] && line=Fizz' ||
  add_rule '[ $((i % 5)) -eq 0 ] && line=Buzz' ||
  add_rule '[ $((i % 15)) -eq 0 ] && line=FizzBuzz' ||
  echo "agent: nothing left to fix"
