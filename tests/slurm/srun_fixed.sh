#!/usr/bin/env bash
# srun -n 4 lockstep run over the fixed seed schedule: the job completes and passes lockstep check;
# the report names the Slurm job, step and node list.
source "$(dirname "$0")/lib.sh"
slurm_up
export LOCKSTEP_RENDEZVOUS_DIR="$T/rdv"
mkdir -p "$LOCKSTEP_RENDEZVOUS_DIR"
D="$T/trace"
srun -J lockstep-seed-fixed -n 4 --time=2 lockstep run -o "$D" -- seed_deadlock --fixed > "$T/job.log" 2>&1 \
  || { cat "$T/job.log"; fail "the fixed schedule failed under srun"; }
[ "$(grep -c "ops completed" "$T/job.log")" -eq 4 ] || { cat "$T/job.log"; fail "not every task completed"; }
lockstep check "$D" | tee "$T/check.txt"
grep -q "clean: 4 processes" "$T/check.txt" || fail "check did not see 4 processes"
lockstep analyze --json "$D" > "$T/analyze.json"
python3 - "$T/analyze.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
jobs = j["jobs"]
assert len(jobs) == 1 and jobs[0]["launcher"] == "slurm", jobs
assert jobs[0]["step_id"] == "0" and jobs[0]["ranks"] == "0-3", jobs
ids = sorted(p["launcher"]["slurm_procid"] for p in j["processes"])
assert ids == ["0", "1", "2", "3"], ids
print("jobs:", jobs)
PY
echo "PASS: 4 tasks under srun, clean"
