#!/usr/bin/env bash
# Run the named make targets one after another, all of them even when one fails, then
# print how long each took and exit non-zero if any failed.
set -uo pipefail
declare -a names=() results=() times=()
status=0
for gate in "$@"; do
  printf '\n===== %s =====\n' "$gate"
  start=$(date +%s)
  if make --no-print-directory "$gate"; then result=ok; else result=FAILED; status=1; fi
  names+=("$gate"); results+=("$result"); times+=("$(($(date +%s) - start))")
done
printf '\n===== summary =====\n'
for i in "${!names[@]}"; do
  printf '  %-14s %-7s %4ss\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
done
[ "$status" -eq 0 ] && echo "all gates ok" || echo "some gates FAILED"
exit "$status"
