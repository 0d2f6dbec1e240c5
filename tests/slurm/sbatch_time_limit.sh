#!/usr/bin/env bash
# sbatch with examples/slurm/lockstep.sbatch (unchanged) over the seed schedule: the job hangs,
# its output has each task's hang line and the in-job diagnosis, Slurm's time limit ends it
# (SIGTERM, SIGKILL after KillWait) and the traces are intact: analyze names seq 3750.
# The job was submitted by sbatch_time_limit_submit.sh (ctest fixture "sbatch_job"): its 60-90 s
# (Slurm counts time limits in minutes and checks them every 30 s) run while ctest runs other
# tests; this half waits only for what is not done yet.
source "$(dirname "$0")/lib.sh"
slurm_up
S="$BUILD/slurm-tests/sbatch_time_limit_submit"
[ -s "$S/job.id" ] || fail "no job id in $S/job.id (slurm.sbatch_time_limit_submit must run first)"
job=$(cat "$S/job.id")
export LOCKSTEP_TRACE_DIR="$S/trace"
echo "checking job $job"
# TIMEOUT while slurmctld still holds the job; once it forgot it (MinJobAge=300 s after the
# end), slurmctld's own line, written after the submission.
timed_out() {
  local state
  state=$(job_state "$job")
  test "$state" = TIMEOUT && return 0
  test -z "$state" &&
    tail -n +"$(($(cat "$S/log.lines") + 1))" "$LOCKSTEP_SLURM_DIR/log/slurmctld.log" |
      grep -q "Time limit exhausted for JobId=$job\$"
}
wait_for 120 "the hang lines in the job's output" 'test "$(grep -c "no NCCL progress for" "$S/job.log" 2>/dev/null)" -ge 4'
wait_for 30 "the in-job diagnosis" 'grep -q "FIRST DIVERGENCE" "$S/job.log"'
wait_for 180 "the time limit to end job $job" timed_out
cat "$S/job.log"
grep -q "DUE TO TIME LIMIT" "$S/job.log" || fail "the job's output does not show the time limit"
files=("$LOCKSTEP_TRACE_DIR"/*.lockstep.sqlite)
[ "${#files[@]}" -eq 4 ] || fail "expected 4 trace files, got ${#files[@]}"
for f in "${files[@]}"; do
  [ "$(meta "$f" exit_reason)" = SIGTERM ] || fail "$f: exit_reason '$(meta "$f" exit_reason)', expected SIGTERM (time limit)"
  [ "$(count_ops "$f")" -eq 3750 ] || fail "$f: $(count_ops "$f") ops, expected 3750"
done
rc=0
lockstep analyze "$LOCKSTEP_TRACE_DIR" > "$T/analyze.txt" || rc=$?
cat "$T/analyze.txt"
[ "$rc" -eq 1 ] || fail "analyze exited $rc, expected 1"
grep -q "seq 3750: op type differs: reduce_scatter vs all_to_all" "$T/analyze.txt" || fail "analyze does not name seq 3750"
grep -q "Slurm job $job step 0" "$T/analyze.txt" || fail "analyze does not name Slurm job $job"
echo "PASS: sbatch job $job ended by its time limit with 4 intact traces"
