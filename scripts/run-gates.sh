#!/usr/bin/env bash
# Run the named make targets one after another, all of them even when one fails, then
# print how long each took and exit non-zero if any failed.
#
#   run-gates.sh lint sanity bg:molecule pytest wait integration
#
# bg:NAME starts NAME in the background, beside the gates after it: its lines come out as
# they are written, each prefixed "[NAME]". `wait` waits for every gate started so far in
# the background. `nice` runs every gate after it at nice 19, so a gate started before it
# keeps the CPU whenever it wants it and the later ones use what it leaves idle.
set -uo pipefail
declare -a names=() results=() times=()
declare -A bg_pid=() bg_start=()
status=0
begin=$(date +%s)

record() {  # record NAME RESULT SECONDS
  names+=("$1"); results+=("$2"); times+=("$3")
  [ "$2" = ok ] || status=1
}

wait_background() {
  local gate result
  for gate in "${!bg_pid[@]}"; do
    if wait "${bg_pid[$gate]}"; then result=ok; else result=FAILED; fi
    printf '\n===== %s (background) ended: %s =====\n' "$gate" "$result"
    record "$gate" "$result" "$(($(date +%s) - bg_start[$gate]))"
    unset "bg_pid[$gate]"
  done
}

for gate in "$@"; do
  case "$gate" in
    nice)
      printf '\n===== the gates below run at nice 19 =====\n'
      renice -n 19 -p $$ >/dev/null
      ;;
    wait)
      running="${!bg_pid[*]}"
      printf '\n===== waiting for: %s =====\n' "${running:-(nothing)}"
      wait_background
      ;;
    bg:*)
      gate=${gate#bg:}
      printf '\n===== %s (in the background; its lines start with [%s]) =====\n' "$gate" "$gate"
      bg_start[$gate]=$(date +%s)
      # The pipeline's status is make's (pipefail); sed -u keeps the lines flowing.
      (make --no-print-directory "$gate" 2>&1 | sed -u "s/^/[$gate] /") &
      bg_pid[$gate]=$!
      ;;
    *)
      printf '\n===== %s =====\n' "$gate"
      start=$(date +%s)
      if make --no-print-directory "$gate"; then result=ok; else result=FAILED; fi
      record "$gate" "$result" "$(($(date +%s) - start))"
      ;;
  esac
done
wait_background
printf '\n===== summary =====\n'
for i in "${!names[@]}"; do
  printf '  %-14s %-7s %4ss\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
done
printf '  %-14s %-7s %4ss\n' "(wall)" "" "$(($(date +%s) - begin))"
[ "$status" -eq 0 ] && echo "all gates ok" || echo "some gates FAILED"
exit "$status"
