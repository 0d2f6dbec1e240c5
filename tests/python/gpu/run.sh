#!/bin/bash
# Python-frame checks on a machine without this project's build deps (the GPU machine: system
# Python 3.12 + torch): builds the test extension with g++ (layout_check.cpp included when the
# interpreter has internal headers), runs the unittest suite, the torch autograd-thread check
# and the benchmark. Usage (repo root): tests/python/gpu/run.sh [python]
set -euo pipefail
PY=${1:-python3}
export PYTHONDONTWRITEBYTECODE=1
INC=$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")
SUF=$($PY -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
OUT=$(mktemp -d)
SRCS="tests/python/pyframes_testmod.cpp interposer/python_frames.cpp"
if [ -f "$INC/internal/pycore_frame.h" ]; then
  SRCS="$SRCS tests/python/layout_check.cpp"
else
  echo "note: $INC has no internal headers; struct layout not verified"
fi
g++ -std=c++20 -O2 -shared -fPIC -Iinterposer -isystem "$INC" $SRCS -o "$OUT/lockstep_pyframes_test$SUF" -ldl
echo "built with $($PY --version) ($INC)"
(cd tests/python && PYTHONPATH="$OUT" timeout 120 $PY -m unittest test_python_frames)
if $PY -c "import torch" 2>/dev/null; then
  PYTHONPATH="$OUT" timeout 120 $PY tests/python/gpu/torch_autograd_check.py
fi
PYTHONPATH="$OUT" timeout 300 $PY bench/python_frames_bench.py
if $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  g++ -std=c++20 -O2 -shared -fPIC -Iinterposer tests/python/gpu/nccl_hook_probe.cpp \
      interposer/python_frames.cpp -o "$OUT/nccl_hook_probe.so" -ldl
  PROBE_OUT="$OUT/probe.txt" LD_PRELOAD="$OUT/nccl_hook_probe.so" timeout 300 \
      $PY tests/python/gpu/torch_nccl_probe.py
fi
