#!/usr/bin/env bash
# lockstep attach --slurm on a hung 4-task seed job over 2 "hosts" (fake_host.sh): one collector
# per node through srun --overlap, the analysis over the snapshots names the ReduceScatter count
# divergence (NCCL RAS of the CPU NCCL), every rank read, and reads the job's lockstep traces
# (the job runs under `lockstep run`, whose USR1 flush is how the job answers
# scancel --signal=USR1); afterwards the job still runs, still hangs and still answers USR1.
source "$(dirname "$0")/lib.sh"
slurm_up
export LOCKSTEP_RENDEZVOUS_DIR="$T/rdv"
mkdir -p "$LOCKSTEP_RENDEZVOUS_DIR"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export NCCL_RAS_ADDR=127.0.0.1:$port
D="$T/trace"
srun -J lockstep-attach-seed -n 4 -o "$T/task-%t.log" \
  "$SRC/tests/slurm/fake_host.sh" lockstep run -o "$D" --hang-timeout 600 -- seed_deadlock &
srun_pid=$!
trap 'kill $srun_pid 2>/dev/null || true' EXIT
for t in 0 1 2 3; do wait_for 120 "task $t's last op" 'grep -q "then waiting for it" "$T/task-$t.log"'; done
job=$(job_id lockstep-attach-seed)
rc=0
t0=$(date +%s%N)
lockstep attach --slurm "$job" -o "$T/snap" --json > "$T/attach.json" 2> "$T/attach.err" || rc=$?
echo "attach --slurm: $(( ($(date +%s%N) - t0) / 1000000 )) ms from command to verdict (a figure, not a check)"
cat "$T/attach.err"
[ "$rc" -eq 1 ] || fail "attach --slurm exited $rc, expected 1 (divergence found): $(cat "$T/attach.json")"
python3 - "$T/attach.json" <<'PY' || fail "attach --slurm verdict"
import json, sys
j = json.load(open(sys.argv[1]))
ranks = sorted(r["rank"] for r in j["ranks"] if r["snapshot"])
assert ranks == [0, 1, 2, 3], ranks
assert j["no_snapshot"] == [], j["no_snapshot"]
d = j["divergences"]
assert len(d) == 1 and d[0]["collective"] == "ReduceScatter", d
counts = {r: c["count"] for c in d[0]["counts"] for r in c["ranks"]}
assert counts[0] == counts[2] == counts[3] == counts[1] + 1, counts  # rank 1 swapped its ops
assert all(r["waits_in"].startswith("cuStreamSynchronize") for r in j["ranks"]), [r["waits_in"] for r in j["ranks"]]
# The job's LOCKSTEP_DIR is found and read as evidence of its own (proven where its rows are).
assert [(t["kind"], t["found_by"].split(" ")[0]) for t in j["traces"]] == [("recorder", "LOCKSTEP_DIR")], j["traces"]
print("attach --slurm:", j["verdict"])
PY
ls "$T/snap"
# The job is unchanged: still running, the seeds still hang, USR1 still reaches the tasks.
[ "$(job_state "$job")" = RUNNING ] || fail "job $job is $(job_state "$job") after attach"
scancel --signal=USR1 "$job"
for f in "$D"/*.lockstep.sqlite; do
  wait_for 20 "$f to record the USR1 flush" 'test "$(meta "$f" exit_reason)" = SIGUSR1'
done
for t in 0 1 2 3; do
  ! grep -q "completed in" "$T/task-$t.log" || fail "task $t's seed finished: the hang was disturbed"
done
[ "$(job_state "$job")" = RUNNING ] || fail "job $job is $(job_state "$job") after USR1"
scancel "$job"
wait $srun_pid || true
trap - EXIT
echo PASS
