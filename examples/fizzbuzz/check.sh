#!/bin/sh
# The external check: runs fizzbuzz.sh, compares each line with expected.txt, and writes a JUnit
# report (report.xml, one test case per number) so that loopexec can follow the failing set.
# Exit 0 only when every line matches.
set -u
sh ./fizzbuzz.sh > actual.txt 2>&1
failing=0
{
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo '<testsuite name="fizzbuzz">'
  n=1
  while [ "$n" -le 15 ]; do
    want=$(sed -n "${n}p" expected.txt)
    got=$(sed -n "${n}p" actual.txt)
    if [ "$want" = "$got" ]; then
      echo "  <testcase classname=\"fizzbuzz\" name=\"line_$n\"/>"
    else
      failing=$((failing + 1))
      echo "  <testcase classname=\"fizzbuzz\" name=\"line_$n\"><failure message=\"expected $want, got $got\"/></testcase>"
    fi
    n=$((n + 1))
  done
  echo '</testsuite>'
} > report.xml
echo "check: $failing of 15 lines wrong"
[ "$failing" -eq 0 ]
