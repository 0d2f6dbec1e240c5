#!/usr/bin/env bash
# srun -n 4 lockstep run over the seed schedule on the CPU NCCL fixture: the job hangs at seq
# 3750; every task's output has the recorder's hang line and rank 0's the in-job diagnosis;
# scancel --signal=USR1 flushes every trace while the job lives on; scancel ends it with its
# traces intact; lockstep analyze names the seq, the ops and the Slurm job.
source "$(dirname "$0")/lib.sh"
slurm_up
export LOCKSTEP_RENDEZVOUS_DIR="$T/rdv"
mkdir -p "$LOCKSTEP_RENDEZVOUS_DIR"
D="$T/trace"

srun -J lockstep-seed-hang -n 4 -o "$T/task-%t.log" \
  lockstep run -o "$D" --hang-timeout 2 -- seed_deadlock &
srun_pid=$!
trap 'kill $srun_pid 2>/dev/null || true' EXIT
wait_for 90 "the job to start" 'test -n "$(job_id lockstep-seed-hang)"'
job=$(job_id lockstep-seed-hang)
for t in 0 1 2 3; do
  wait_for 120 "task $t's hang line" 'grep -q "no NCCL progress for" "$T/task-$t.log"'
done
wait_for 60 "the in-job diagnosis in task 0's output" 'grep -q "FIRST DIVERGENCE" "$T/task-0.log"'
grep -q "seq 3750" "$T/task-0.log" || fail "the in-job diagnosis does not name seq 3750: $(cat "$T/task-0.log")"

# USR1: every trace flushed (exit_reason), ops on disk, and the job still runs.
scancel --signal=USR1 "$job"
files=("$D"/*.lockstep.sqlite)
[ "${#files[@]}" -eq 4 ] || fail "expected 4 trace files, got ${#files[@]}"
for f in "${files[@]}"; do
  wait_for 20 "$f to record the USR1 flush" 'test "$(meta "$f" exit_reason)" = SIGUSR1'
  n=$(count_ops "$f")
  [ "$n" -eq 3750 ] || fail "$f holds $n sequenced ops after USR1, expected 3750"
done
[ "$(job_state "$job")" = RUNNING ] || fail "job $job is $(job_state "$job") after USR1, expected RUNNING"

# Launcher identity in every file.
procids=""
for f in "${files[@]}"; do
  [ "$(meta "$f" launcher_slurm_job_id)" = "$job" ] || fail "$f: launcher_slurm_job_id is not $job"
  [ "$(meta "$f" launcher_slurm_step_id)" = 0 ] || fail "$f: launcher_slurm_step_id is not 0"
  [ -n "$(meta "$f" launcher_slurm_job_nodelist)" ] || fail "$f: no launcher_slurm_job_nodelist"
  procids+="$(meta "$f" launcher_slurm_procid)"
done
[ "$(echo "$procids" | grep -o . | sort | tr -d '\n')" = 0123 ] || fail "SLURM_PROCIDs recorded: $procids"

# The node's summary of its trace files, written on the job's own node through its allocation
# while the job hangs (docs/slurm.md); analyze reads it in place of the files.
srun --overlap --jobid "$job" --ntasks-per-node=1 lockstep summarize "$D" >"$T/summarize.txt" 2>&1 ||
  fail "srun --overlap lockstep summarize failed: $(cat "$T/summarize.txt")"
grep -q ": 4 trace files" "$T/summarize.txt" || fail "the node summary does not cover the 4 files: $(cat "$T/summarize.txt")"
# Seconds later the recorders have committed heartbeats (and nothing else): the summary still
# stands for the files, refreshed.
sleep 2.5
lockstep analyze "$D" >"$T/analyze-summary.txt" 2>&1 || true
grep -q "seq 3750" "$T/analyze-summary.txt" || fail "analyze from the node summary does not name seq 3750"
grep -q "1 node summary (lockstep summarize) stood for 4 files, checked unchanged (4 of them refreshed since only by their recorder's heartbeat" \
  "$T/analyze-summary.txt" || fail "analyze did not take the hung job's files from the node summary: $(grep '^read' "$T/analyze-summary.txt")"

# scancel: the job ends (SIGTERM, SIGKILL after KillWait), the traces stay usable.
scancel "$job"
wait $srun_pid || true
trap - EXIT
# srun returns while Slurm may still show the job COMPLETING for a moment.
wait_for 30 "job $job to end as CANCELLED (now: \$(job_state $job))" 'test "$(job_state "$job")" = CANCELLED' 
rc=0
lockstep analyze "$D" > "$T/analyze.txt" 2>&1 || rc=$?
cat "$T/analyze.txt"
[ "$rc" -eq 1 ] || fail "lockstep analyze exited $rc, expected 1 (divergence found)"
grep -q "FIRST DIVERGENCE: .* seq 3750: op type differs: reduce_scatter vs all_to_all" "$T/analyze.txt" \
  || fail "analyze does not name seq 3750 and the two ops"
grep -q "Slurm job $job step 0" "$T/analyze.txt" || fail "analyze does not name Slurm job $job"
if grep -q "^skipped" "$T/analyze.txt"; then fail "a trace file was skipped after scancel"; fi
# The recorders wrote their exit to the files after summarizing: the summary is stale, ignored.
grep -q "node summary ignored, its files read: .*stale" "$T/analyze.txt" || fail "the stale node summary is not named"
for f in "${files[@]}"; do
  [ "$(meta "$f" exit_reason)" = SIGTERM ] || fail "$f: exit_reason $(meta "$f" exit_reason), expected SIGTERM (scancel)"
  [ "$(count_ops "$f")" -eq 3750 ] || fail "$f lost ops after scancel"
done
echo "PASS: job $job hung at seq 3750, flushed on USR1, cancelled with 4 intact traces"
