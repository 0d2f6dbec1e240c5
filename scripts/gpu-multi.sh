#!/usr/bin/env bash
# The seed deadlock on 2 real GPUs (kind nvidia-h200-x2 or any box with >= 2 GPUs), in one call:
#   1. the C++ seed demo (driver API + NCCL) under lockstep: broken order hangs at seq 3750, the
#      recorder's hang line and the in-job diagnosis reach stderr, `lockstep analyze` names it;
#      --fixed completes and `lockstep check` passes;
#   2. the PyTorch program (FSDP2 + Ulysses, examples/torch/fsdp_ulysses.py) under torchrun:
#      --broken hangs, `lockstep analyze` run WHILE it hangs names reduce_scatter (FSDP
#      post_backward) vs all_to_all (Ulysses backward); --fixed completes, `lockstep check` passes;
#   3. `lockstep replay` of the recorded schedules on the 2 GPUs with real NCCL.
# Logs and traces go to ${OUT:-./gpu-out}. Uses build-gpu/ (carried or built as in gpu-check.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
W=$(mktemp -d /tmp/lockstep-multi.XXXXXX)
S=$OUT/multi-summary.md
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
NCCL_LIB=$($PY -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="${NCCL_LIB:+$NCCL_LIB:}$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B=${BUILD_DIR:-$ROOT/build-gpu}
export PATH=$B/bin:$PATH
HT=${HANG_TIMEOUT:-15}

pass=0; fail=0
verdict() { if [ "$1" = ok ]; then pass=$((pass+1)); echo "- [x] $2" >>"$S"; else fail=$((fail+1)); echo "- [ ] $2" >>"$S"; fi; echo "== $1: $2"; }
run_logged() { local log=$1; shift; "$@" >"$W/$log" 2>&1; local rc=$?; echo "-- $log (rc=$rc)"; tail -n 40 "$W/$log"; return $rc; }
# Starts CMD in its own session, waits until LOG shows a hang line (or TIMEOUT s), runs
# `lockstep analyze` on TRACE while the job still hangs, waits for the in-job diagnosis, kills it.
hang_and_analyze() {
  local name=$1 trace=$2 timeout=$3; shift 3
  setsid "$@" >"$W/$name.log" 2>&1 &
  local pid=$! t=0
  while [ $t -lt "$timeout" ] && kill -0 $pid 2>/dev/null && ! grep -q 'no NCCL progress' "$W/$name.log"; do sleep 1; t=$((t+1)); done
  if grep -q 'no NCCL progress' "$W/$name.log"; then verdict ok "$name: hang line on stderr after ~${t}s"; else verdict fail "$name: no hang line within ${timeout}s (see $name.log)"; fi
  lockstep analyze "$trace" >"$W/$name-live-analyze.log" 2>&1; local rc=$?
  echo "-- $name live analyze (rc=$rc)"; cat "$W/$name-live-analyze.log"
  lockstep analyze --json "$trace" >"$W/$name-live-analyze.json" 2>/dev/null
  sleep 8  # the in-job diagnosis (spawned by the lowest rank's recorder) lands in the job log
  if grep -q 'first divergence\|diverge' "$W/$name.log"; then verdict ok "$name: in-job diagnosis in the job's stderr"; else verdict fail "$name: no in-job diagnosis in $name.log"; fi
  kill -TERM -- -$pid 2>/dev/null; sleep 3; kill -KILL -- -$pid 2>/dev/null; wait $pid 2>/dev/null
  echo "-- $name job log (tail)"; tail -n 60 "$W/$name.log"
}

{ echo "# lockstep on 2 real GPUs ($(date -u +%F))"; echo; echo '```'
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  $PY -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  echo "NCCL_LIB=$NCCL_LIB"; echo '```'; echo; } >"$S"

# 1. C++ seed demo on real NCCL.
hang_and_analyze seed-broken "$W/t-seed" 120 \
  lockstep run -o "$W/t-seed" --hang-timeout "$HT" -- lockstep-launch -n 2 --timeout 300 -- seed_deadlock
grep -q 'seq 3750' "$W/seed-broken-live-analyze.log" && grep -q reduce_scatter "$W/seed-broken-live-analyze.log" && grep -q all_to_all "$W/seed-broken-live-analyze.log" \
  && verdict ok "seed (C++): analyze names seq 3750 reduce_scatter vs all_to_all" || verdict fail "seed (C++): analyze output lacks seq 3750 / reduce_scatter / all_to_all"
run_logged seed-fixed.log lockstep run -o "$W/t-seed-fixed" -- lockstep-launch -n 2 --timeout 120 -- seed_deadlock --fixed \
  && verdict ok "seed (C++) --fixed completes" || verdict fail "seed (C++) --fixed did not complete"
run_logged seed-fixed-check.log lockstep check "$W/t-seed-fixed" && verdict ok "seed --fixed: lockstep check passes" || verdict fail "seed --fixed: check failed"

# 2. PyTorch FSDP2 + Ulysses on 2 GPUs.
TR="$PY -m torch.distributed.run --nproc-per-node 2 --master-port 29533"
hang_and_analyze torch-broken "$W/t-torch" 240 \
  lockstep run -o "$W/t-torch" --stacks python --hang-timeout "$HT" -- $TR examples/torch/fsdp_ulysses.py --broken --steps 3
grep -q reduce_scatter "$W/torch-broken-live-analyze.log" && grep -q all_to_all "$W/torch-broken-live-analyze.log" \
  && verdict ok "torch: live analyze names reduce_scatter vs all_to_all" || verdict fail "torch: live analyze lacks reduce_scatter/all_to_all"
grep -q post_backward "$W/torch-broken-live-analyze.log" && verdict ok "torch: FSDP post_backward in the stacks" || verdict fail "torch: no post_backward frame in the report"
run_logged torch-fixed.log lockstep run -o "$W/t-torch-fixed" --stacks python -- $TR examples/torch/fsdp_ulysses.py --fixed --steps 3 \
  && verdict ok "torch --fixed completes" || verdict fail "torch --fixed did not complete"
run_logged torch-fixed-check.log lockstep check "$W/t-torch-fixed" && verdict ok "torch --fixed: lockstep check passes" || verdict fail "torch --fixed: check failed"
run_logged torch-compiled-fixed.log lockstep run -o "$W/t-torch-cf" --stacks python -- $TR examples/torch/fsdp_ulysses.py --compile --fixed --steps 3 \
  && verdict ok "torch --compile --fixed completes" || verdict fail "torch --compile --fixed did not complete"
run_logged torch-compiled-fixed-check.log lockstep check "$W/t-torch-cf" && verdict ok "torch --compile --fixed: check passes" || verdict fail "torch --compile --fixed: check failed"

# 3. Replay on real NCCL: broken schedules hang, fixed ones complete.
for t in seed torch; do
  run_logged replay-$t-broken.log lockstep replay "$W/t-$t" --timeout 30; rc=$?
  [ $rc -ne 0 ] && grep -qi 'hang\|diverge' "$W/replay-$t-broken.log" && verdict ok "replay $t broken: hangs (rc=$rc)" || verdict fail "replay $t broken: rc=$rc"
  run_logged replay-$t-fixed.log lockstep replay "$W/t-$t-fixed" --timeout 60 && verdict ok "replay $t fixed: completes" || verdict fail "replay $t fixed: did not complete"
  run_logged model-$t.log lockstep replay --model "$W/t-$t"
  run_logged model-$t-fixed.log lockstep replay --model "$W/t-$t-fixed"
done

echo >>"$S"; echo "$pass passed, $fail failed" >>"$S"
for f in "$W"/*.sqlite; do :; done
tar -C "$W" -czf "$OUT/multi-logs.tar.gz" --exclude='*.sqlite-journal' . 2>/dev/null
cat "$S"
