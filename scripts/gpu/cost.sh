#!/usr/bin/env bash
# The recorder's cost on one GPU, in one device call (issue 15; docs/gpu-results.md, "the
# recorder's cost, part by part"): C++ per-call figures (processes alternating), the per-part
# breakdown (in-process), driver primitives, hooked runtime calls, step-time A/B (in-process for
# lockstep, alternating children for the Flight Recorder). One archive: $OUT/cost.tgz.
#
#   COST_DIR=build-gpu-cost LIBS="before after" bash scripts/gpu/cost.sh
#
# COST_DIR holds what the dev box built (stripped): bin/nccl_call_overhead, lib/libunwind.so.8,
# and one lib-<name>/liblockstep.so per build compared (LIBS names them). Knobs: PROC_ROUNDS,
# PRIMITIVES=0|1, STEP_LIBS, SHAPE=host|gpu, PAIRS, PROCS, FR_STEPS, STEP_TIMEOUT, FR_TIMEOUT.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
D=$(cd "${COST_DIR:-build-gpu-cost}" && pwd)
OUT=${OUT:-$ROOT/gpu-out}; R=$OUT/cost; mkdir -p "$R"
exec > >(tee "$R/run.log") 2>&1
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
PY=python3
NCCL_LIB=$($PY -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))')
export LD_LIBRARY_PATH="$D/lib:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export LOCKSTEP_HANG_TIMEOUT=60
T=$(mktemp -d /tmp/cost.XXXXXX)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource) (available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource))"
  lscpu | grep -E 'Model name|^CPU\(s\)|Hypervisor'
  $PY -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
} >"$R/machine.txt" 2>&1
cat "$R/machine.txt"
B=$D/bin/nccl_call_overhead
C=$R/c.jsonl; : >"$C"
LIBS=${LIBS:-before}
rec() {  # rec LIB STACKS ARGS...
  local lib=$1 s=$2; shift 2
  rm -rf "$T/tr"; LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=$s LD_PRELOAD=$D/lib-$lib/liblockstep.so \
    timeout -s KILL 60 "$B" "$@"
}
stamp "C++ plain, alternating processes"
for round in $(seq 1 ${PROC_ROUNDS:-3}); do
  timeout -s KILL 60 "$B" --rounds=15 >>"$C" 2>>"$R/c.err"
  for lib in $LIBS; do for s in none native; do
    rec $lib $s --rounds=15 | sed "s/\"mode\": \"plain\"/\"mode\": \"plain-$lib\"/" >>"$C" 2>>"$R/c.err"
  done; done
done
stamp "C++ parts"
for lib in $LIBS; do for s in none native; do
  rec $lib $s --mode=parts --rounds=15 | sed "s/\"mode\": \"parts\"/\"mode\": \"parts-$lib\"/" >>"$C" 2>>"$R/c.err"
done; done
if [ "${PRIMITIVES:-1}" = 1 ]; then
stamp "primitives"
timeout -s KILL 90 "$B" --mode=primitives --rounds=15 >>"$C" 2>>"$R/c.err"
fi
SP=$($PY -c 'import site;print(site.getsitepackages()[0])')
export CUDART=$(find "$SP/nvidia" "$SP/torch/lib" -name 'libcudart.so.1*' 2>/dev/null | head -n 1)
stamp "runtime calls (CUDART=$CUDART)"
for round in 1 2; do
  timeout -s KILL 60 "$B" --mode=runtime --rounds=15 >>"$C" 2>>"$R/c.err"
  for lib in $LIBS; do rec $lib none --mode=runtime --rounds=15 | sed "s/\"mode\": \"runtime\"/\"mode\": \"runtime-$lib\"/" >>"$C" 2>>"$R/c.err"; done
done
cat "$C"
S=$R/steps.jsonl; : >"$S"
for lib in ${STEP_LIBS:-$LIBS}; do
  stamp "step A/B lockstep $lib"
  rm -rf "$T/tr"; LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=python LD_PRELOAD=$D/lib-$lib/liblockstep.so \
    timeout -s KILL ${STEP_TIMEOUT:-150} $PY "$ROOT/bench/step_overhead.py" --ab lockstep --label "lockstep-python-$lib-${SHAPE:-host}" \
    --shape ${SHAPE:-host} --pairs ${PAIRS:-30} >>"$S" 2>>"$R/step.err"
  stamp "rc=$? trace: $(ls -la $T/tr 2>&1 | tail -n 2)"
  for f in $T/tr/*.sqlite; do $PY - "$f" <<'PYX' 2>&1 | tee -a "$R/step-trace.txt"; done
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
q = lambda s: db.execute(s).fetchall()
try:
    print("ops by kind:", q("SELECT op, count(*) FROM ops GROUP BY op"))
except Exception as e:
    print("ops query:", e)
try:
    print("waits by kind:", q("SELECT kind, count(*) FROM waits GROUP BY kind"))
    print("completions:", q("SELECT count(*) FROM completions"))
except Exception as e:
    print("query:", e)
print("meta:", q("SELECT key, value FROM meta WHERE key IN ('dropped_records','stack_mode','bench_off','completion','hot_clock')"))
PYX
done
stamp "step A/B FR (children)"
timeout -s KILL ${FR_TIMEOUT:-150} $PY "$ROOT/bench/step_overhead.py" --ab fr --label "fr-${SHAPE:-host}" --shape ${SHAPE:-host} --procs ${PROCS:-4} --steps ${FR_STEPS:-10} --warmup 3 >>"$S" 2>>"$R/step.err"
stamp "rc=$?"
$PY "$ROOT/bench/step_ratio.py" "$S" | tee "$R/step-table.md"
tail -n 20 "$R/step.err"
rm -rf "$T"
tar -C "$OUT" -czf "$OUT/cost.tgz" cost && rm -rf "$R"
stamp done
