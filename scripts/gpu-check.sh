#!/usr/bin/env bash
# Runs lockstep against real NCCL + PyTorch on a GPU machine, in one call, and leaves a summary
# and all logs/traces under ${OUT:-./gpu-out}. World size 1 (one GPU) unless WORLD_SIZE says more.
#
#   scripts/gpu-check.sh               # uses build-gpu/ if present (carried), else builds it
#
# Build on a machine without GTest/Benchmark/libunwind-dev: the binaries only need
# libsqlite3.so.0 and libstdc++ at run time; libunwind.so.8 is dlopened (LOCKSTEP_LIBUNWIND or
# LD_LIBRARY_PATH; .carry/lib is searched here).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/lockstep-gpu.XXXXXX)
SUMMARY=$OUT/summary.md
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29511}
export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
[ -d "$ROOT/.carry/lib" ] && export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=${PYTHON:-python3}

BUILD=${BUILD_DIR:-$ROOT/build-gpu}
if [ ! -x "$BUILD/bin/lockstep" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_BUILD_TESTS=OFF \
        -DLOCKSTEP_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$ROOT/.carry" >"$W/build.log" 2>&1 &&
  cmake --build "$BUILD" -j"$(nproc)" --target lockstep lockstep >>"$W/build.log" 2>&1 ||
  { echo "build failed"; tail -30 "$W/build.log"; }
fi
LS=$BUILD/bin/lockstep
export PATH=$BUILD/bin:$PATH

pass=0; fail=0
step() {  # step NAME CMD... : runs CMD, logs to $W/NAME.log, records the verdict
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" >"$W/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 )); local dt="$((ms / 1000)).$(( (ms % 1000) / 100 ))"
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "- [x] $name (${dt}s)" >>"$SUMMARY"
  else fail=$((fail+1)); echo "- [ ] $name: exit $rc (${dt}s), see $name.log" >>"$SUMMARY"; fi
  echo "== $name: rc=$rc (${dt}s)"; tail -n 25 "$W/$name.log"
  return $rc
}
expect_rc() { local want=$1; shift; "$@"; local rc=$?; [ $rc -eq $want ] || { echo "exit $rc, expected $want"; return 1; }; }

{
  echo "# lockstep on a real GPU ($(date -u +%F))"; echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  $PY -c 'import sys,torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1
  echo "lockstep: $LS"; "$LS" --version 2>&1
  echo '```'; echo
} >"$SUMMARY"

# 1. Every PyTorch collective, checked op by op (op, dtype, count, Python function and line).
step collectives "$LS" run -o "$W/t-coll" --stacks python -- \
     $PY examples/torch/collectives.py --expect "$W/coll-expect.json"
step collectives-check $PY scripts/gpu/check_trace.py collectives "$W/t-coll" "$W/coll-expect.json"
step collectives-analyze "$LS" analyze "$W/t-coll"
step collectives-native-stacks "$LS" run -o "$W/t-coll-native" --stacks native -- \
     $PY examples/torch/collectives.py
step collectives-ops-view "$LS" ops "$W/t-coll" --rank 0

# 2. CUDA graphs: captured collectives counted at every replay.
step cuda-graph "$LS" run -o "$W/t-graph" --stacks python -- \
     $PY examples/torch/cuda_graph.py --replays 5
grep '^{' "$W/cuda-graph.log" | tail -1 >"$W/graph-result.json"
step cuda-graph-check $PY scripts/gpu/check_trace.py graph "$W/t-graph" "$W/graph-result.json"
step cuda-graph-analyze "$LS" analyze "$W/t-graph"

# 3. The seed-shaped FSDP2 + Ulysses program at world size 1 (eager, then compiled with the fix).
step fsdp-ulysses "$LS" run -o "$W/t-fsdp" --stacks python -- \
     $PY examples/torch/fsdp_ulysses.py --steps 3
step fsdp-ulysses-check "$LS" check "$W/t-fsdp"
step fsdp-ulysses-baseline "$LS" check --write-baseline "$W/fsdp.baseline" "$W/t-fsdp"
step fsdp-ulysses-compiled-fixed "$LS" run -o "$W/t-fsdp-c" --stacks python -- \
     $PY examples/torch/fsdp_ulysses.py --steps 3 --compile --fixed
step fsdp-ulysses-compiled-analyze "$LS" analyze "$W/t-fsdp-c"
step fsdp-stacks "$LS" stacks "$W/t-fsdp" --comm init0 --seq 10

# 4. Replay of a recorded schedule on real NCCL (one rank).
step replay-collectives "$LS" replay "$W/t-coll" --timeout 60
step replay-model "$LS" replay --model "$W/t-coll"

# 5. Overhead: 8-byte all_reduce host cost and a small training step, side by side.
: >"$W/overhead.jsonl"
for round in $(seq 1 "${OVERHEAD_ROUNDS:-2}"); do
  $PY bench/torch_overhead.py --calls 3000 --repeats 41 --label baseline >>"$W/overhead.jsonl" 2>>"$W/overhead.err"
  TORCH_FR_BUFFER_SIZE=20000 $PY bench/torch_overhead.py --calls 3000 --repeats 41 --label flight-recorder >>"$W/overhead.jsonl" 2>>"$W/overhead.err"
  for s in none native python; do
    "$LS" run -o "$W/t-bench-$s-$round" --stacks $s -- $PY bench/torch_overhead.py --calls 3000 --repeats 41 --label "lockstep-$s" \
      >>"$W/overhead.jsonl" 2>>"$W/overhead.err"
  done
done
step overhead-table $PY scripts/gpu/overhead_table.py "$W/overhead.jsonl"
{ echo; echo "## Overhead under PyTorch"; echo; cat "$W/overhead-table.log"; } >>"$SUMMARY"
# The step-time A/B (docs/performance.md) (in-process: recording / no stacks / paused), opt-in:
# STEP_PAIRS=30 adds ~1 min (host shape).
if [ "${STEP_PAIRS:-0}" -gt 0 ]; then
  LOCKSTEP_DIR="$W/t-step" LOCKSTEP_STACKS=python LD_PRELOAD="$BUILD/lib/liblockstep.so" \
    $PY bench/step_overhead.py --ab lockstep --pairs "$STEP_PAIRS" >"$W/steps.jsonl" 2>"$W/steps.err"
  step step-ratio $PY bench/step_ratio.py "$W/steps.jsonl"
  { echo; echo "## Step time, in-process A/B"; echo; cat "$W/step-ratio.log"; } >>"$SUMMARY"
fi

# 6. The same without PyTorch: ncclAllReduce(8 B) issue cost, C++ (bench/nccl_call_overhead.cpp),
#    rounds alternating between configurations so drift hits all of them alike.
NCCL_LIB=$($PY -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)
if [ ! -x "$BUILD/bin/nccl_call_overhead" ]; then
  g++ -std=c++20 -O2 -I/usr/local/cuda/include bench/nccl_call_overhead.cpp -o "$BUILD/bin/nccl_call_overhead" \
      -L"$NCCL_LIB" -l:libnccl.so.2 -lcuda -ldl
fi
: >"$W/c-overhead.jsonl"
for round in $(seq 1 "${C_ROUNDS:-5}"); do
  LD_LIBRARY_PATH="$NCCL_LIB:$LD_LIBRARY_PATH" "$BUILD/bin/nccl_call_overhead" >>"$W/c-overhead.jsonl" 2>>"$W/c-overhead.err"
  for s in none native; do
    LD_LIBRARY_PATH="$NCCL_LIB:$LD_LIBRARY_PATH" "$LS" run -o "$W/t-c-$s" --stacks $s -- \
      "$BUILD/bin/nccl_call_overhead" >>"$W/c-overhead.jsonl" 2>>"$W/c-overhead.err"
  done
done
# Where the recorder's time goes: each hot-path part switched off in turn, in one process.
if [ "${C_PARTS:-1}" = 1 ]; then
  for s in none native; do
    LD_LIBRARY_PATH="$NCCL_LIB:$LD_LIBRARY_PATH" "$LS" run -o "$W/t-c-parts-$s" --stacks $s -- \
      "$BUILD/bin/nccl_call_overhead" --mode=parts >>"$W/c-overhead.jsonl" 2>>"$W/c-overhead.err"
  done
fi
step c-overhead-table $PY scripts/gpu/c_overhead_table.py "$W/c-overhead.jsonl"
{ echo; echo "## ncclAllReduce issue cost without PyTorch (C++)"; echo; cat "$W/c-overhead-table.log"; } >>"$SUMMARY"


echo >>"$SUMMARY"; echo "$pass passed, $fail failed" >>"$SUMMARY"
tar -C "$W" -czf "$OUT/gpu-logs.tar.gz" --exclude='t-bench-*' --exclude='t-c-*' . 2>/dev/null
cat "$SUMMARY"
