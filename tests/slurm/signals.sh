#!/usr/bin/env bash
# lockstep run delivers each signal once: it becomes the command (exec). A signal sent to the
# process group (as a shell or scheduler does), and Slurm's signals to every task (srun
# forwarding, scancel --signal=USR1/CONT, scancel's SIGTERM) each arrive once in the command.
source "$(dirname "$0")/lib.sh"
# A command that counts the signals it gets (the trap runs between 0.1 s sleeps).
prog='trap "echo got USR1" USR1; trap "echo got CONT" CONT; trap "echo got TERM; exit 0" TERM; echo ready; while :; do sleep 0.1; done'

# 1. Without Slurm: kill -TERM to the whole process group of `lockstep run`.
setsid lockstep run -o "$T/t1" -- sh -c "$prog" > "$T/pgrp.log" 2>&1 &
pid=$!
wait_for 10 "the command to start" 'grep -q ready "$T/pgrp.log"'
kill -USR1 -- "-$pid"
wait_for 10 "USR1" 'grep -q "got USR1" "$T/pgrp.log"'
kill -TERM -- "-$pid"
wait $pid || fail "lockstep run exited $? after the command's trap exited 0"
sleep 0.3
[ "$(grep -c "got USR1" "$T/pgrp.log")" -eq 1 ] || fail "USR1 to the process group arrived $(grep -c "got USR1" "$T/pgrp.log") times"
[ "$(grep -c "got TERM" "$T/pgrp.log")" -eq 1 ] || fail "TERM to the process group arrived $(grep -c "got TERM" "$T/pgrp.log") times"

# 2. Under Slurm: srun -n 2, then scancel --signal=USR1, --signal=CONT, and scancel.
slurm_up
srun -J lockstep-signals -n 2 -o "$T/task-%t.log" lockstep run -o "$T/t2" -- sh -c "$prog" &
srun_pid=$!
trap 'kill $srun_pid 2>/dev/null || true' EXIT
wait_for 90 "both tasks to start" 'test "$(cat "$T"/task-*.log 2>/dev/null | grep -c ready)" -eq 2'
job=$(job_id lockstep-signals)
scancel --signal=USR1 "$job"
for t in 0 1; do wait_for 10 "task $t's USR1" 'grep -q "got USR1" "$T/task-$t.log"'; done
scancel --signal=CONT "$job"
for t in 0 1; do wait_for 10 "task $t's CONT" 'grep -q "got CONT" "$T/task-$t.log"'; done
scancel "$job"
wait $srun_pid || true
trap - EXIT
for t in 0 1; do
  for s in USR1 TERM; do
    n=$(grep -c "got $s" "$T/task-$t.log" || true)
    [ "$n" -eq 1 ] || fail "task $t got SIG$s $n times (expected once): $(cat "$T/task-$t.log")"
  done
  # scancel sends SIGCONT before SIGTERM: 2 CONTs in all (scancel --signal=CONT and scancel).
  n=$(grep -c "got CONT" "$T/task-$t.log" || true)
  [ "$n" -le 2 ] || fail "task $t got SIGCONT $n times (expected at most 2)"
done
echo "PASS: every signal arrived once"
