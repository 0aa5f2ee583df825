#!/usr/bin/env bash
# beside.sh NAME -- CMD_A... -- CMD_B...
#
# Runs CMD_A in the background beside CMD_B, CMD_A's output kept in a file
# and printed after CMD_B ends (so the two logs don't interleave), and
# fails if either failed. `make test` runs verify beside the chaos suites
# this way: see the Makefile's comment above .NOTPARALLEL.
set -uo pipefail

name=${1:?usage: beside.sh NAME -- CMD_A... -- CMD_B...}
shift
[ "${1:-}" = "--" ] || { echo "beside.sh: expected -- after NAME" >&2; exit 2; }
shift
a=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do a+=("$1"); shift; done
[ "${1:-}" = "--" ] || { echo "beside.sh: expected -- before the second command" >&2; exit 2; }
shift
[ ${#a[@]} -gt 0 ] && [ $# -gt 0 ] || { echo "beside.sh: two commands needed" >&2; exit 2; }

log=$(mktemp -t "beside-$name.XXXXXX")
trap 'rm -f "$log"' EXIT
start=$SECONDS
echo "beside.sh: $name runs beside: $*"
"${a[@]}" >"$log" 2>&1 &
pid=$!
# Stop it too if we are interrupted.
trap 'kill "$pid" 2>/dev/null; rm -f "$log"' INT TERM
"$@"
rc_b=$?
wait "$pid"
rc_a=$?
echo "--- $name (ran beside the above: exit $rc_a, both done after $((SECONDS - start)) s) ---"
cat "$log"
echo "--- end of $name ---"
if [ $rc_a -ne 0 ]; then
	echo "beside.sh: $name failed (exit $rc_a)" >&2
fi
[ $rc_a -eq 0 ] && [ $rc_b -eq 0 ]
