#!/usr/bin/env bash
# One device call that re-checks this round's build on a real GPU (world size 1 unless 2+ GPUs):
#   1. scripts/gpu-check.sh: every PyTorch collective recorded with Python frames, CUDA graphs,
#      FSDP2+Ulysses, replay on real NCCL, and the recorder's cost (short rounds);
#   2. scripts/gpu/reach.sh: NCCL reached through ctypes (pynccl style) and NCCL's profiler plugin;
#   3. the Python-frame capture benchmark on the machine's CPython;
#   4. with 2+ GPUs: scripts/gpu-multi.sh (the seed hang diagnosed live on real NCCL).
# Needs build-gpu/ (bin, lib) and .carry/lib/libunwind.so.8 carried from the dev machine (see
# docs/gpu.md). Results: one archive, $OUT/round.tgz (the device returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}; R=$OUT/round; mkdir -p "$R"
export BUILD_DIR=$ROOT/build-gpu PATH=$ROOT/build-gpu/bin:$PATH
NG=$(nvidia-smi -L 2>/dev/null | wc -l)
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

stamp "gpu-check"
OUT=$R/check OVERHEAD_ROUNDS=${OVERHEAD_ROUNDS:-1} C_ROUNDS=${C_ROUNDS:-3} \
  timeout -s KILL ${CHECK_TIMEOUT:-300} bash scripts/gpu-check.sh >"$R/gpu-check.log" 2>&1
stamp "gpu-check rc=$?"; tail -n 30 "$R/check/summary.md" 2>/dev/null

if [ -f scripts/gpu/reach.sh ]; then
  stamp "reach"
  OUT=$R/reach timeout -s KILL ${REACH_TIMEOUT:-150} bash scripts/gpu/reach.sh >"$R/reach.log" 2>&1
  stamp "reach rc=$?"; tail -n 40 "$R/reach.log"
fi

stamp "python frames (suite, torch autograd thread, bench)"
timeout -s KILL ${PYFRAMES_TIMEOUT:-150} bash tests/python/gpu/run.sh >"$R/pyframes.log" 2>&1
stamp "pyframes rc=$?"; tail -n 25 "$R/pyframes.log"

if [ "$NG" -ge 2 ]; then
  stamp "gpu-multi"
  OUT=$R/multi timeout -s KILL ${MULTI_TIMEOUT:-420} bash scripts/gpu-multi.sh >"$R/gpu-multi.log" 2>&1
  stamp "gpu-multi rc=$?"; tail -n 30 "$R/multi/multi-summary.md" 2>/dev/null
fi
tar -C "$OUT" -czf "$OUT/round.tgz" round && rm -rf "$R"
stamp done
