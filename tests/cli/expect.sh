#!/usr/bin/env bash
# Runs a command and checks how it ends.
#   usage: expect.sh EXIT_CODE REGEX -- COMMAND...
# Passes when the command exits with EXIT_CODE within the time limit, its output
# matches REGEX (grep -E), and, for failures, "error:" is printed exactly once
# (rank 0 speaks for all ranks).
set -uo pipefail
want=$1 regex=$2
shift 3
out=$(timeout -k 5 120 "$@" 2>&1)
code=$?
fail() { printf 'FAIL: %s\n--- command: %s\n--- exit %s, output:\n%s\n' "$1" "$*" "$code" "$out"; exit 1; }
[ "$code" = 124 ] && fail "timed out (hang)"
[ "$code" = "$want" ] || fail "expected exit $want"
grep -Eq -- "$regex" <<<"$out" || fail "output does not match /$regex/"
if [ "$want" != 0 ]; then
  n=$(grep -c '^error' <<<"$out")
  [ "$n" = 1 ] || fail "expected one error line, got $n"
fi
echo "ok: exit $code, matched /$regex/"
