#!/usr/bin/env bash
# A 4-task job spread over 2 "hosts" writing one directory: tasks 0-1 on node-0, 2-3 on node-1
# (UTS namespaces), node-1's monotonic clock one day ahead of node-0's (a time namespace; see
# fake_host.sh). The clocks must not change the verdict (seq 3750, every rank blocked, no host
# stale); then node-1 dies (SIGKILL to both its ranks) and the report names the host.
source "$(dirname "$0")/lib.sh"
slurm_up
export LOCKSTEP_RENDEZVOUS_DIR="$T/rdv"
mkdir -p "$LOCKSTEP_RENDEZVOUS_DIR"
D="$T/trace"
srun -J lockstep-hosts -n 4 -o "$T/task-%t.log" \
  "$SRC/tests/slurm/fake_host.sh" lockstep run -o "$D" --hang-timeout 2 -- seed_deadlock &
srun_pid=$!
trap 'kill $srun_pid 2>/dev/null || true' EXIT
for t in 0 1 2 3; do wait_for 120 "task $t's hang line" 'grep -q "no NCCL progress for" "$T/task-$t.log"'; done
job=$(job_id lockstep-hosts)
ls "$D"
[ "$(ls "$D" | grep -c '^node-0-.*\.lockstep\.sqlite$')" -eq 2 ] || fail "expected 2 traces from node-0"
[ "$(ls "$D" | grep -c '^node-1-.*\.lockstep\.sqlite$')" -eq 2 ] || fail "expected 2 traces from node-1"
for f in "$D"/node-1-*.lockstep.sqlite; do
  [ "$(meta "$f" start_mono_ns)" -gt 86400000000000 ] || fail "$f: node-1's monotonic clock is not offset"
done

check_verdict() {  # JSON report -> same verdict as on one host
  python3 - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
dead_host = sys.argv[2]
fd = j["first_divergence"]
assert fd is not None and fd["seq"] == 3750, fd
ops = sorted({s["op"] for s in fd["sides"]})
assert ops == ["all_to_all", "reduce_scatter"], ops
hosts = {h["host"]: h for h in j["hosts"]}
assert hosts["node-0"]["ranks"] == "0-1" and hosts["node-1"]["ranks"] == "2-3", hosts
for name, h in hosts.items():
    stale = h["stopped_before_s"] is not None
    assert stale == (name == dead_host), (name, h)
print("verdict: seq", fd["seq"], ops, "hosts", {n: (h["ranks"], h["stopped_before_s"]) for n, h in hosts.items()})
PY
}
rc=0; lockstep analyze --json --stale-seconds 2 "$D" > "$T/alive.json" || rc=$?
[ "$rc" -eq 1 ] || fail "analyze exited $rc"
check_verdict "$T/alive.json" none || fail "clocks that disagree changed the verdict"
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['hang']['ranks']; s={x['status'] for x in r}; assert s=={'blocked'}, r" \
  "$T/alive.json" || fail "a rank is not blocked with both hosts alive"

# node-1 dies: both its ranks, at once.
pids=""
for f in "$D"/node-1-*.lockstep.sqlite; do pids+=" $(meta "$f" pid)"; done
kill -KILL $pids
sleep 4
rc=0; lockstep analyze --stale-seconds 2 "$D" > "$T/dead.txt" || rc=$?
cat "$T/dead.txt"
[ "$rc" -eq 1 ] || fail "analyze exited $rc"
grep -q "hosts: node-0 ranks 0-1; node-1 ranks 2-3" "$T/dead.txt" || fail "the report does not group ranks by host"
grep -q "host node-1: every trace (ranks 2-3) stopped .* before node-0's" "$T/dead.txt" || fail "the report does not name the dead host"
lockstep analyze --json --stale-seconds 2 "$D" > "$T/dead.json" || true
check_verdict "$T/dead.json" node-1 || fail "the dead host changed the first divergence"
scancel "$job"
wait $srun_pid || true
trap - EXIT
echo "PASS: 2 hosts with disagreeing clocks, same verdict; the dead host is named"
