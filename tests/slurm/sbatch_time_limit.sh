#!/usr/bin/env bash
# sbatch with examples/slurm/lockstep.sbatch (unchanged) over the seed schedule: the job hangs,
# its output has each task's hang line and the in-job diagnosis, Slurm's time limit ends it
# (SIGTERM, SIGKILL after KillWait) and the traces are intact: analyze names seq 3750.
# Slurm counts time limits in minutes and checks them every 30 s: this test takes 60-100 s.
source "$(dirname "$0")/lib.sh"
slurm_up
export LOCKSTEP_RENDEZVOUS_DIR="$T/rdv" LOCKSTEP_TRACE_DIR="$T/trace" LOCKSTEP_HANG_TIMEOUT_S=2
mkdir -p "$LOCKSTEP_RENDEZVOUS_DIR"
job=$(sbatch --parsable -J lockstep-sbatch -n 4 --time=1 -o "$T/job.log" "$SRC/examples/slurm/lockstep.sbatch" seed_deadlock)
echo "submitted job $job"
wait_for 120 "the hang lines in the job's output" 'test "$(grep -c "no NCCL progress for" "$T/job.log" 2>/dev/null)" -ge 4'
wait_for 30 "the in-job diagnosis" 'grep -q "FIRST DIVERGENCE" "$T/job.log"'
wait_for 180 "the time limit to end job $job" 'test "$(job_state "$job")" = TIMEOUT'
cat "$T/job.log"
grep -q "DUE TO TIME LIMIT" "$T/job.log" || fail "the job's output does not show the time limit"
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
