#!/bin/sh
# FizzBuzz for 1..15: multiples of 3 print Fizz, of 5 Buzz, of both FizzBuzz.
# It starts out wrong on purpose; the example agent (agent.sh) adds one rule per iteration.
i=1
while [ "$i" -le 15 ]; do
  line=$i
  # (next rule)
  echo "$line"
  i=$((i + 1))
done
