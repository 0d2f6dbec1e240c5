#!/usr/bin/env bash
# lockstep attach on a real-NCCL job hung at world size 1 (one H200, NCCL 2.28.9 of the torch
# wheel): examples/torch/hang_ws1.py holds its stream with cuStreamWaitValue32_v2, queues
# collectives behind it and blocks in torch.cuda.synchronize(). Then, with the job hung:
#   attach.txt / attach.json   `lockstep attach PID` (stacks, Python frames, RAS, verdict)
#   attach-nonative.txt        `lockstep attach --no-native PID` (no stop at all)
#   ras.txt                    the RAS answer (the snapshot's ras section)
#   state-before/after.txt     /proc state of the job around the attach (unchanged, still hung)
#   versions.txt, hang.log     torch/NCCL/driver versions, the job's output
# Logs land in ${OUT:-./gpu-out}/attach-ws1 (archived as attach-ws1.tgz).
#   LOCKSTEP=build/bin/lockstep OUT=... bash scripts/gpu/attach_ws1.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; A=$OUT/attach-ws1; mkdir -p "$A"
PY=${PYTHON:-python3}
LOCKSTEP=${LOCKSTEP:-$PWD/build/bin/lockstep}
PORT=${RAS_PORT:-28128}
# RANK/WORLD_SIZE as torchrun would set them (attach reads the rank from the environment).
export NCCL_RAS_ADDR=localhost:$PORT PYTHONUNBUFFERED=1 TORCH_NCCL_ASYNC_ERROR_HANDLING=0 RANK=0 WORLD_SIZE=1
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1
  $PY -c 'import torch,sys; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "python", sys.version.split()[0])' 2>&1
  "$LOCKSTEP" --version; } >"$A/versions.txt"
cat "$A/versions.txt"

# The job: no lockstep anywhere in it.
timeout -s KILL 300 $PY examples/torch/hang_ws1.py >"$A/hang.log" 2>&1 &
tpid=$!
for _ in $(seq 1 600); do grep -q '^hung' "$A/hang.log" && break; sleep 0.1; done
grep -q '^hung' "$A/hang.log" || { echo "the job did not reach its hang"; cat "$A/hang.log"; kill -9 $tpid; exit 1; }
job=$(cat /proc/$tpid/task/$tpid/children | cut -d' ' -f1)  # the python under timeout
echo "job pid $job" | tee "$A/job.txt"
sleep 2  # let the host settle in the synchronize
state() { echo "stat: $(cut -d' ' -f3 /proc/$1/stat)"; grep -E '^(State|TracerPid|SigPnd|ShdPnd|Threads)' /proc/$1/status; }
state $job >"$A/state-before.txt"

t0=$(date +%s.%N)
"$LOCKSTEP" attach $job -o "$A/snap" >"$A/attach.txt" 2>"$A/attach.stderr"; echo "attach rc=$?" | tee -a "$A/attach.txt"
t1=$(date +%s.%N)
echo "command to verdict: $(echo "$t1 - $t0" | bc) s" | tee -a "$A/attach.txt"
"$LOCKSTEP" attach --from "$A/snap" --json >"$A/attach.json"; echo "attach --from rc=$?"
"$LOCKSTEP" attach --no-native $job >"$A/attach-nonative.txt" 2>&1; echo "attach --no-native rc=$?"
$PY - "$A/snap" >"$A/ras.txt" 2>&1 <<'PYEOF'
import glob, json, sys
for f in glob.glob(sys.argv[1] + "/*.attach.json"):
    print(json.dumps(json.load(open(f))["ras"], indent=1))
PYEOF
state $job >"$A/state-after.txt"
cat "$A/attach.stderr" "$A/attach.txt" "$A/ras.txt"
diff "$A/state-before.txt" "$A/state-after.txt" && echo "job state unchanged" | tee -a "$A/attach.txt"
kill -0 $job 2>/dev/null && echo "job still hung after the attach" | tee -a "$A/attach.txt"
kill -9 $job; wait $tpid 2>/dev/null
tar -C "$OUT" -czf "$OUT/attach-ws1.tgz" attach-ws1 && echo "wrote $OUT/attach-ws1.tgz"
