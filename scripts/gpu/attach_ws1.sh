#!/usr/bin/env bash
# lockstep attach on a real-NCCL job hung at world size 1 (one H200, NCCL 2.28.9 of the torch
# wheel): examples/torch/hang_ws1.py holds its stream with cuStreamWaitValue32_v2, queues
# collectives behind it and blocks in torch.cuda.synchronize(). Then, with the job hung:
#   attach.txt / attach.json   `lockstep attach PID` (stacks, Python frames, RAS, verdict; the stop
#                              and its breakdown, and those of 9 more attaches)
#   attach.html                the same as the HTML report
#   attach-nonative.txt        `lockstep attach --no-native PID` (no stop at all)
#   ras.txt                    the RAS answer (the snapshot's ras section)
#   state-before/after.txt     /proc state of the job around the attach (unchanged, still hung)
#   versions.txt, hang.log     torch/NCCL/driver versions, the job's output
#
#   here:     bash scripts/gpu/attach_ws1.sh stage DIR
#     strips ./build's lockstep into DIR/bin and copies the libraries it needs that the GPU
#     machine lacks (libunwind-ptrace, libunwind-x86_64, libunwind, liblzma) into DIR/lib; only
#     lockstep's own commands get DIR/lib, never the job. Put DIR under the git-ignored .carry/.
#   GPU:      bash scripts/gpu/attach_ws1.sh run DIR      (from the repository root)
#     writes $OUT/attach-ws1.tgz (every log and the snapshot) and $OUT/attach.txt (the report):
#     two files, within what the device tool brings back.
set -uo pipefail
cmd=${1:-}; D=${2:-}
[ -n "$cmd" ] && [ -n "$D" ] || { sed -n 2,19p "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$cmd" = stage ]; then
  set -e
  mkdir -p "$D/bin" "$D/lib"
  strip -o "$D/bin/lockstep" "$ROOT/build/bin/lockstep"
  # Every library lockstep needs from libunwind's family, resolved here (their DT_NEEDED
  # included), plus liblzma (libunwind's dependency) and the CLI's allocator (libmimalloc).
  for l in $(ldd "$ROOT/build/bin/lockstep" | awk '/libunwind|liblzma|libmimalloc/ {print $3}'); do cp -L "$l" "$D/lib/"; done
  ls -la "$D"/*
  LD_LIBRARY_PATH=$D/lib ldd "$D/bin/lockstep" | grep -E "not found|unwind|lzma|mimalloc" || true
  exit 0
fi
[ "$cmd" = run ] || { echo "unknown command $cmd"; exit 2; }
D=$(cd "$D" && pwd)
cd "$ROOT"
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
A=$(mktemp -d /tmp/attach-ws1.XXXXXX)/attach-ws1; mkdir -p "$A"
lockstep() { LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$D/bin/lockstep" "$@"; }
PY=${PYTHON:-python3}
PORT=${RAS_PORT:-28128}
# RANK/WORLD_SIZE as torchrun would set them (attach reads the rank from the environment).
export NCCL_RAS_ADDR=localhost:$PORT PYTHONUNBUFFERED=1 TORCH_NCCL_ASYNC_ERROR_HANDLING=0 RANK=0 WORLD_SIZE=1
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1
  $PY -c 'import torch,sys; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "python", sys.version.split()[0])' 2>&1
  lockstep --version; } >"$A/versions.txt"
cat "$A/versions.txt"

# The job: no lockstep anywhere in it.
timeout -s KILL 300 $PY examples/torch/hang_ws1.py >"$A/hang.log" 2>&1 &
tpid=$!
for _ in $(seq 1 600); do grep -q '^hung' "$A/hang.log" && break; sleep 0.1; done
grep -q '^hung' "$A/hang.log" || { echo "the job did not reach its hang"; cat "$A/hang.log"; cp "$A/hang.log" "$OUT/"; kill -9 $tpid; exit 1; }
job=$(cat /proc/$tpid/task/$tpid/children | cut -d' ' -f1)  # the python under timeout
echo "job pid $job" | tee "$A/job.txt"
sleep 2  # let the host settle in the synchronize
state() { echo "stat: $(cut -d' ' -f3 /proc/$1/stat)"; grep -E '^(State|TracerPid|SigPnd|ShdPnd|Threads)' /proc/$1/status; }
state $job >"$A/state-before.txt"

t0=$(date +%s.%N)
lockstep attach $job -o "$A/snap" >"$A/attach.txt" 2>"$A/attach.stderr"; echo "attach rc=$?" | tee -a "$A/attach.txt"
t1=$(date +%s.%N)
echo "command to verdict: $(awk "BEGIN {printf \"%.2f\", $t1 - $t0}") s" | tee -a "$A/attach.txt"
# The stop and where it went (interrupt, unwind, python, detach, lockstep's CPU), then 9 more
# attaches for its spread.
grep ' stopped ' "$A/attach.stderr" | tee -a "$A/attach.txt"
for _ in $(seq 1 9); do lockstep attach $job --ras-timeout 1 2>&1 >/dev/null | grep ' stopped '; done | tee -a "$A/attach.txt"
lockstep attach --from "$A/snap" --json >"$A/attach.json"; echo "attach --from rc=$?"
lockstep report "$A/snap" -o "$A/attach.html"; echo "report rc=$?"
lockstep attach --no-native $job >"$A/attach-nonative.txt" 2>&1; echo "attach --no-native rc=$?"
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
cp "$A/attach.txt" "$OUT/attach.txt"
tar -C "$(dirname "$A")" -czf "$OUT/attach-ws1.tgz" attach-ws1 && echo "wrote $OUT/attach-ws1.tgz"
rm -rf "$(dirname "$A")"
