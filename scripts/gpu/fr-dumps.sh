#!/usr/bin/env bash
# Real PyTorch Flight Recorder dumps for lockstep's FR reader (no lockstep involved), on a GPU
# machine with torch (2 GPUs for the hung run). Everything lands in ${OUT:-./gpu-out}/fr:
#   ws1-completed/   world size 1, every collective completed (pickle + JSON per rank)
#   ws1-inflight/    world size 1, dumped while the collectives were still queued behind a sleep
#   ws2-completed/   world size 2 (torchrun), completed
#   ws2-hung/        examples/torch/fsdp_ulysses.py --broken WITHOUT lockstep: the dumps torch
#                    writes itself at the watchdog timeout (TORCH_FR_DUMP_TEMP_FILE)
# plus FR's own analyzer (torch.distributed.flight_recorder) run on each, its sources and the
# TORCH_* variable names the installed torch knows, for reference.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; F=$OUT/fr; mkdir -p "$F"
PY=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export TORCH_FR_BUFFER_SIZE=20000 TORCH_NCCL_TRACE_BUFFER_SIZE=20000
NG=$(nvidia-smi -L 2>/dev/null | wc -l)
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  $PY -c 'import torch,sys; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "python", sys.version.split()[0])'
} >"$F/versions.txt" 2>&1
cat "$F/versions.txt"

timeout -s KILL 60 $PY examples/torch/fr_dump.py --out "$F/ws1-completed" >"$F/ws1-completed.log" 2>&1; echo "ws1-completed rc=$?"
timeout -s KILL 60 $PY examples/torch/fr_dump.py --out "$F/ws1-inflight" --inflight >"$F/ws1-inflight.log" 2>&1; echo "ws1-inflight rc=$?"
mkdir -p "$F/ws1-watchdog"
TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE="$F/ws1-watchdog/nccl_trace_rank_" \
TORCH_NCCL_DEBUG_INFO_TEMP_FILE="$F/ws1-watchdog/nccl_trace_rank_" \
  timeout -s KILL 100 $PY examples/torch/fr_dump.py --out "$F/ws1-watchdog" --watchdog 5 >"$F/ws1-watchdog.log" 2>&1
echo "ws1-watchdog rc=$?"
if [ "$NG" -ge 2 ]; then
  timeout -s KILL 90 $PY -m torch.distributed.run --nproc-per-node 2 --master-port 29561 examples/torch/fr_dump.py \
    --out "$F/ws2-completed" >"$F/ws2-completed.log" 2>&1; echo "ws2-completed rc=$?"
  mkdir -p "$F/ws2-hung"
  t0=$(date +%s)
  TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE="$F/ws2-hung/nccl_trace_rank_" \
  TORCH_NCCL_DEBUG_INFO_TEMP_FILE="$F/ws2-hung/nccl_trace_rank_" TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=20000 \
    timeout -s KILL 150 $PY -m torch.distributed.run --nproc-per-node 2 --master-port 29562 \
    examples/torch/fsdp_ulysses.py --broken --steps 3 --timeout-s 20 >"$F/ws2-hung.log" 2>&1
  echo "ws2-hung rc=$? after $(( $(date +%s) - t0 ))s"; ls -la "$F/ws2-hung"
fi
for d in "$F"/ws*/; do ls -la "$d"; done

# FR's own analyzer, beside lockstep's, on the same dumps.
timeout 30 $PY -m torch.distributed.flight_recorder.fr_trace -h >"$F/fr_trace-help.txt" 2>&1
for d in "$F"/ws*/; do n=$(basename "$d"); case $n in *-json) continue;; esac
  timeout -s KILL 60 $PY -m torch.distributed.flight_recorder.fr_trace "$d" -p nccl_trace_rank_ >"$F/fr_trace-$n.txt" 2>&1
  echo "fr_trace $n rc=$?"; tail -n 30 "$F/fr_trace-$n.txt"
done
FRSRC=$($PY -c 'import os,torch.distributed.flight_recorder as m; print(os.path.dirname(m.__file__))' 2>/dev/null)
[ -n "$FRSRC" ] && tar -C "$(dirname "$FRSRC")" -czf "$F/flight_recorder-src.tgz" --exclude=__pycache__ "$(basename "$FRSRC")"
TC=$($PY -c 'import os,torch; print(os.path.join(os.path.dirname(torch.__file__),"lib","libtorch_cuda.so"))')
strings "$TC" 2>/dev/null | grep -oE '\bTORCH_(FR|NCCL)_[A-Z_]+' | sort -u >"$F/torch-env-names.txt"
# Interpreters present on this image (issue: Python frames on every CPython).
{ ls -1 /usr/bin/python3* /usr/local/bin/python3* 2>/dev/null; command -v uv conda pyenv; } >"$F/pythons.txt" 2>&1
# $OUT returns at most 8 files: everything in one archive.
tar -C "$OUT" -czf "$OUT/fr.tgz" fr && find "$F" -mindepth 1 -delete && rmdir "$F"
