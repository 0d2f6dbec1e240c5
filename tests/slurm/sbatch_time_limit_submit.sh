#!/usr/bin/env bash
# First half of slurm.sbatch_time_limit (the ctest fixture "sbatch_job"): submits the job and
# returns at once. Slurm keeps time limits in whole minutes and checks them every 30 s, so the
# job needs 60-90 s to reach its limit; it runs in Slurm while ctest runs other tests, and
# slurm.sbatch_time_limit (scheduled last) checks what it left.
source "$(dirname "$0")/lib.sh"
slurm_up
export LOCKSTEP_RENDEZVOUS_DIR="$T/rdv" LOCKSTEP_TRACE_DIR="$T/trace" LOCKSTEP_HANG_TIMEOUT_S=2
mkdir -p "$LOCKSTEP_RENDEZVOUS_DIR"
# slurmctld's log so far: the check reads only what comes after (job ids restart with the state).
wc -l < "$LOCKSTEP_SLURM_DIR/log/slurmctld.log" > "$T/log.lines" 2>/dev/null || echo 0 > "$T/log.lines"
job=$(sbatch --parsable -J lockstep-sbatch -n 4 --time=1 -o "$T/job.log" "$SRC/examples/slurm/lockstep.sbatch" seed_deadlock)
[ -n "$job" ] || fail "sbatch printed no job id"
echo "$job" > "$T/job.id"
echo "submitted job $job"
