#!/usr/bin/env bash
# The recorder's cost on one GPU, in one device call (issue 15; docs/gpu-results.md, "the
# recorder's cost, part by part"): C++ per-call figures (processes alternating), the per-part
# breakdown (in-process), driver primitives, hooked runtime calls, the step-time A/B in-process
# for lockstep (steps alternating one by one) and in alternating child processes for the Flight
# Recorder. One archive: $OUT/cost.tgz.
#
#   COST_DIR=build-cost LIBS="before after" bash scripts/gpu/cost.sh
#
# COST_DIR holds what the dev box built (stripped): bin/nccl_call_overhead, lib/libunwind.so.8,
# and one lib-<name>/liblockstep.so per build compared (LIBS names them; the last one is the
# build under test: it also runs with LOCKSTEP_COMPLETION=memop, the stream-memop completion
# signal, and runs the step A/B). The run of 2026-12-01 (docs/gpu-results.md) used this script
# at 9089c89, where memop was the default and the variant was LOCKSTEP_BENCH_OFF=memop. Knobs: PROC_ROUNDS, PARTS_ROUNDS, PRIMITIVES=0|1, SHAPE=host|gpu,
# STEP_SECONDS, STEP_CONFIGS, PROCS, FR_STEPS, STEP_TIMEOUT, FR_TIMEOUT.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
D=$(cd "${COST_DIR:-build-cost}" && pwd)
BENCH=${BENCH_DIR:-$ROOT/bench}
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
LIBS=${LIBS:-before after}
UNDER_TEST=${LIBS##* }
# The trace of a run: ops, completions, the signal used, dropped records (schema-2 views).
trace_summary() {
  for f in "$T"/tr/*; do [ -f "$f" ] || continue; $PY - "$f" "$1" <<'PYX'; done
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
q = lambda s: db.execute(s).fetchall()
out = {"run": sys.argv[2]}
for k, s in (("ops", "SELECT count(*) FROM ops"), ("sequenced_ops", "SELECT count(*) FROM ops WHERE seq IS NOT NULL"),
             ("completions", "SELECT count(*) FROM completions"),
             ("waits", "SELECT count(*) FROM waits"),
             ("meta", "SELECT key, value FROM meta WHERE key IN ('completion_signal','completion','dropped_records','stack_mode','bench_off','hot_clock','recorder_stopped')")):
    try:
        r = q(s)
        out[k] = r[0][0] if k != "meta" else dict(r)
    except Exception as e:
        out[k] = f"error: {e}"
print("trace:", out)
PYX
}
# rec LIB STACKS LABEL ARGS...: one recorded run of the C++ benchmark, its JSON relabelled.
rec() {
  local lib=$1 s=$2 label=$3; shift 3
  local signal=event
  case $label in *-memop) signal=memop ;; esac
  rm -rf "$T/tr"
  LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=$s LOCKSTEP_COMPLETION=$signal LD_PRELOAD=$D/lib-$lib/liblockstep.so \
    timeout -s KILL 60 "$B" "$@" | sed -E "s/\"mode\": \"([a-z]+)\"/\"mode\": \"\\1-$label\"/" >>"$C" 2>>"$R/c.err"
}
stamp "C++ plain, alternating processes (LIBS=$LIBS; under test: $UNDER_TEST)"
for round in $(seq 1 ${PROC_ROUNDS:-3}); do
  timeout -s KILL 60 "$B" --rounds=15 >>"$C" 2>>"$R/c.err"
  for lib in $LIBS; do for s in none native; do rec $lib $s $lib --rounds=15; done; done
  rec $UNDER_TEST none $UNDER_TEST-memop --rounds=15
  [ $round = 1 ] && trace_summary "plain-$UNDER_TEST-memop-none"
  rec $UNDER_TEST none $UNDER_TEST --rounds=15
  [ $round = 1 ] && trace_summary "plain-$UNDER_TEST-none"
done
stamp "C++ parts"
for lib in $LIBS; do for s in none native; do rec $lib $s $lib --mode=parts --rounds=${PARTS_ROUNDS:-11}; done; done
# memop signal on: its "-memop" configuration is the event signal in the same process
rec $UNDER_TEST none $UNDER_TEST-memop --mode=parts --rounds=${PARTS_ROUNDS:-11}
if [ "${PRIMITIVES:-1}" = 1 ]; then
  stamp "primitives"
  timeout -s KILL 90 "$B" --mode=primitives --rounds=15 >>"$C" 2>>"$R/c.err"
fi
SP=$($PY -c 'import site;print(site.getsitepackages()[0])')
export CUDART=$(find "$SP/nvidia" "$SP/torch/lib" -name 'libcudart.so.1*' 2>/dev/null | head -n 1)
stamp "runtime calls (CUDART=$CUDART)"
for round in 1 2; do
  timeout -s KILL 60 "$B" --mode=runtime --rounds=15 >>"$C" 2>>"$R/c.err"
  for lib in $LIBS; do rec $lib none $lib --mode=runtime --rounds=15; done
done
cat "$C"
S=$R/steps.jsonl; : >"$S"
stamp "step A/B lockstep $UNDER_TEST (steps alternating one by one, ${STEP_SECONDS:-120} s)"
rm -rf "$T/tr"; LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=python LD_PRELOAD=$D/lib-$UNDER_TEST/liblockstep.so \
  timeout -s KILL ${STEP_TIMEOUT:-170} $PY "$BENCH/step_overhead.py" --ab lockstep \
  --label "lockstep-python-$UNDER_TEST-${SHAPE:-host}" --shape ${SHAPE:-host} --block 1 --settle 0 \
  --configs ${STEP_CONFIGS:-recording,paused} --pairs 100000 --seconds ${STEP_SECONDS:-120} >>"$S" 2>>"$R/step.err"
stamp "rc=$?"
trace_summary "step-$UNDER_TEST"
stamp "step A/B Flight Recorder (alternating children)"
timeout -s KILL ${FR_TIMEOUT:-80} $PY "$BENCH/step_overhead.py" --ab fr --label "fr-${SHAPE:-host}" --shape ${SHAPE:-host} \
  --procs ${PROCS:-8} --steps ${FR_STEPS:-12} --warmup 3 >>"$S" 2>>"$R/step.err"
stamp "rc=$?"
timeout -s KILL 60 $PY "$BENCH/step_ratio.py" "$S" | tee "$R/step-table.md"
tail -n 20 "$R/step.err"
rm -rf "$T"
tar -C "$OUT" -czf "$OUT/cost.tgz" cost && rm -rf "$R"
stamp done
