#!/usr/bin/env bash
# Run the named make targets one after another, all of them even when one fails, then
# print when each started and ended, the CPU it used, and exit non-zero if any failed.
# Each gate's output also goes to .build/gates/NAME.log; the end of a failed gate's
# (pytest's summary of its failures where there is one) comes again after the summary, so
# a log cut to its last screens still says what failed.
#
#   run-gates.sh lint sanity bg:molecule pytest wait integration
#
# bg:NAME starts NAME in the background, beside the gates after it: its lines come out as
# they are written, each prefixed "[NAME]". `wait` waits for every gate started so far in
# the background. `nice` runs every gate after it at nice 19, so a gate started before it
# keeps the CPU whenever it wants it and the later ones use what it leaves idle.
#
# idle:NAME and low:NAME (also bg:idle:NAME, bg:low:NAME) run NAME in a cpu cgroup of little
# weight as well. Nice alone ranks a gate only against processes of its own session (the
# kernel's autogroups): against the lab's podman nodes, its API server and the ssh masters,
# each a session or a cgroup of its own, a nice-19 gate has an equal share, measured here
# 44/56 on one core (in a shares-2 cgroup: 0.2/99.8), and the lab's playbook runs took
# twice their time alone while nice-only pytest ran beside them.
#   idle: cpu.shares 2, the least: for gates that never wait on a clock.
#   low:  cpu.shares 128 (an eighth of a lab node's): for gates whose commands have
#         timeouts of a minute or so, which the least weight could starve past.
# A gate whose test times a daemon's answer in seconds stays nice only. Nor in either for
# one that opens ssh to the lab's nodes: the ControlPersist master it starts serves every
# later ansible run to that node (~/.ansible/cp), and starved it lost their modules' output
# (seen: "Shared connection to ... closed" with empty stdout, in half of the concurrent
# runs). Needs a writable cgroup-v1 cpu hierarchy (this machine's); elsewhere it says so
# once and runs such gates at nice 19 only.
set -uo pipefail
declare -a names=() results=() starts=() ends=()
declare -A bg_gate=()
status=0
begin=$(date +%s)
LOG_DIR=.build/gates
rm -rf "$LOG_DIR" && mkdir -p "$LOG_DIR"

CGROUPS=/sys/fs/cgroup/cpu
declare -A SHARES=([idle]=2 [low]=128)
cgroups_ready=""

make_cgroups() {  # make the weighted cpu cgroups; false (with why, once) where none can be
  [ -n "$cgroups_ready" ] && { [ "$cgroups_ready" = yes ]; return; }
  cgroups_ready=no
  if [ ! -f "$CGROUPS/cpu.shares" ]; then
    echo "run-gates: no cgroup-v1 cpu hierarchy here: idle: and low: gates run at nice 19 only" >&2
    return 1
  fi
  local class
  for class in "${!SHARES[@]}"; do
    if ! mkdir -p "$CGROUPS/gpuops-gates-$class" 2>/dev/null \
      || ! echo "${SHARES[$class]}" >"$CGROUPS/gpuops-gates-$class/cpu.shares" 2>/dev/null; then
      echo "run-gates: cannot write $CGROUPS/gpuops-gates-$class (not root?): idle: and low:" \
        "gates run at nice 19 only" >&2
      return 1
    fi
  done
  cgroups_ready=yes
}

log_of() { echo "$LOG_DIR/${1//:/-}.log"; }  # log_of GATE: where its output is kept

run_gate() {  # run_gate NAME: make NAME, in its cgroup when NAME is idle:GATE or low:GATE
  local name=$1 gate=$1
  # A subshell of its own: its `times` are this gate's processes' alone, and one that
  # moves itself to a cgroup takes make and all it starts along.
  (
    case "$gate" in
      idle:* | low:*)
        if make_cgroups; then echo "$BASHPID" >"$CGROUPS/gpuops-gates-${gate%%:*}/cgroup.procs"; fi
        gate=${gate#*:}
        ;;
    esac
    make --no-print-directory "$gate"
    rc=$?
    times >"$(log_of "$name").cpu"  # not in a pipeline: a subshell there has no children
    date +%s >"$(log_of "$name").end"
    exit "$rc"
  )
}

cpu_seconds() {  # cpu_seconds GATE: the user and system CPU seconds its processes were charged
  local user sys
  # `times`' second line: its children's, e.g. 12m3.120s 0m40.020s (user, then system).
  read -r user sys < <(sed -n 2p "$(log_of "$1").cpu" 2>/dev/null)
  [ -n "${sys:-}" ] || { echo "?"; return; }
  awk -v u="$user" -v s="$sys" 'function sec(t) { split(t, a, /[ms]/); return a[1] * 60 + a[2] }
    BEGIN { printf "%d", sec(u) + sec(s) }'
}

record() {  # record NAME RESULT START: it ended when it wrote its .end, else now
  local end
  end=$(cat "$(log_of "$1").end" 2>/dev/null || date +%s)
  names+=("$1"); results+=("$2"); starts+=("$(($3 - begin))"); ends+=("$((end - begin))")
  [ "$2" = ok ] || status=1
}

wait_background() {  # each background gate, as it ends (one that ended earlier: at once)
  local pid result gate start
  while [ "${#bg_gate[@]}" -gt 0 ]; do
    pid=""
    if wait -n -p pid "${!bg_gate[@]}"; then result=ok; else result=FAILED; fi
    [ -n "$pid" ] || break  # nothing left to wait for
    read -r gate start <<<"${bg_gate[$pid]}"
    printf '\n===== %s (background) ended: %s =====\n' "$gate" "$result"
    record "$gate" "$result" "$start"
    unset "bg_gate[$pid]"
  done
}

failure_tail() {  # failure_tail GATE: pytest's summary of failures, else the log's last lines
  local log
  log=$(log_of "$1")
  printf '\n===== the end of %s (%s) =====\n' "$1" "$log"
  if grep -q '= short test summary info =' "$log"; then
    sed -n '/= short test summary info =/,$p' "$log" | tail -n 40
  else
    tail -n 25 "$log"
  fi
}

# Made once here, so that the gates' subshells know whether there are any.
case " $* " in *" idle:"* | *" low:"* | *":idle:"* | *":low:"*) make_cgroups ;; esac
for gate in "$@"; do
  case "$gate" in
    nice)
      printf '\n===== the gates below run at nice 19 =====\n'
      renice -n 19 -p $$ >/dev/null
      ;;
    wait)
      running=$(for pid in "${!bg_gate[@]}"; do echo "${bg_gate[$pid]% *}"; done | tr '\n' ' ')
      printf '\n===== waiting for: %s =====\n' "${running:-(nothing)}"
      wait_background
      ;;
    bg:*)
      gate=${gate#bg:}
      printf '\n===== %s (in the background; its lines start with [%s]) =====\n' "$gate" "${gate#*:}"
      start=$(date +%s)
      # The pipeline's status is make's (pipefail); sed -u keeps the lines flowing.
      (run_gate "$gate" 2>&1 | tee "$(log_of "$gate")" | sed -u "s/^/[${gate#*:}] /") &
      bg_gate[$!]="$gate $start"
      ;;
    *)
      printf '\n===== %s =====\n' "$gate"
      start=$(date +%s)
      if run_gate "$gate" 2>&1 | tee "$(log_of "$gate")"; then result=ok; else result=FAILED; fi
      record "$gate" "$result" "$start"
      ;;
  esac
done
wait_background
# Empty by now (podman moves its containers to its own cgroups); left if anything stayed.
for class in "${!SHARES[@]}"; do rmdir "$CGROUPS/gpuops-gates-$class" 2>/dev/null; done
for i in "${!names[@]}"; do
  [ "${results[$i]}" = ok ] || failure_tail "${names[$i]}"
done
# cpu: what the gate's processes and those they waited for used; not what ran elsewhere
# for it (the lab's podman nodes and their kubelets, ssh masters left running).
printf '\n===== summary (seconds from the start) =====\n'
printf '  %-22s %-7s %6s %6s %6s %6s\n' gate result took start end cpu
for i in "${!names[@]}"; do
  printf '  %-22s %-7s %6s %6s %6s %6s\n' "${names[$i]}" "${results[$i]}" \
    "$((ends[i] - starts[i]))" "${starts[$i]}" "${ends[$i]}" "$(cpu_seconds "${names[$i]}")"
done
printf '  %-22s %-7s %6s\n' "(wall)" "" "$(($(date +%s) - begin))"
[ "$status" -eq 0 ] && echo "all gates ok" || echo "some gates FAILED"
exit "$status"
