#!/usr/bin/env bash
# Where the recorder's step-time cost goes, and per-call figures, in one device call (issue 15,
# docs/gpu-results.md "cost session 4"). Writes under $OUT: run.log, machine.txt, c.jsonl (every
# C++ line), steps.jsonl (one line per timed step, with the recorder's profile counters),
# step-table.md (bench/step_ratio.py), trace.txt (the step run's trace summary).
#
#   COST_DIR=build-cost LIBS="before after" STEP_RUNS="after:280:recording,paused" bash cost_attrib.sh
#
# COST_DIR: bin/nccl_call_overhead, lib/ (libunwind.so.8), lib-<name>/liblockstep.so per build in
# LIBS, bench/ (step_overhead.py, step_ratio.py). Knobs: PROC_ROUNDS (C++ plain processes per
# build, alternating), PARTS=0|1, RUNTIME=0|1, PARTS_LIBS, STEP_RUNS ("lib:seconds:configs ...", one
# in-process step A/B per entry; empty: none), FR_PROCS (children per side of the Flight Recorder
# A/B; empty: none), FR_SHAPE, FR_STEPS, FR_SECONDS (no new pair after), FR_TIMEOUT, STEP_SLACK (s added to each one's kill limit), SHAPE.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
D=$(cd "${COST_DIR:-build-cost}" && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
PY=python3
NCCL_LIB=$($PY -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))')
export LD_LIBRARY_PATH="$D/lib:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export LOCKSTEP_HANG_TIMEOUT=60
T=$(mktemp -d /tmp/cost.XXXXXX)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
  lscpu | grep -E 'Model name|^CPU\(s\)|Hypervisor|Thread\(s\) per core'
  $PY -c 'import torch, sys; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "python", sys.version.split()[0])'
  for l in ${LIBS:-}; do echo "lib-$l: $(md5sum < "$D/lib-$l/liblockstep.so")"; done
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
B=$D/bin/nccl_call_overhead
C=$OUT/c.jsonl; : >"$C"
LIBS=${LIBS:-after}
trace_summary() {  # LABEL: ops, completions, waits, meta of the trace(s) in $T/tr
  for f in "$T"/tr/*; do [ -f "$f" ] || continue; timeout -s KILL 60 $PY - "$f" "$1" <<'PYX'; done
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
out = {"run": sys.argv[2]}
for k, s in (("ops", "SELECT count(*) FROM ops"), ("completions", "SELECT count(*) FROM completions"),
             ("waits", "SELECT count(*) FROM waits"), ("stacks", "SELECT count(*) FROM stacks"),
             ("meta", "SELECT key, value FROM meta WHERE key IN ('completion_signal','dropped_records',"
                      "'stack_mode','bench_off','hot_clock','recorder_stopped','unwinder')")):
    try:
        r = db.execute(s).fetchall()
        out[k] = r[0][0] if k != "meta" else dict(r)
    except Exception as e:
        out[k] = f"error: {e}"
print("trace:", out)
PYX
}
# rec LIB STACKS ARGS...: one recorded run of the C++ benchmark, its JSON lines tagged.
rec() {
  local lib=$1 s=$2; shift 2
  rm -rf "$T/tr"
  LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=$s LD_PRELOAD=$D/lib-$lib/liblockstep.so \
    timeout -s KILL 60 "$B" "$@" 2>>"$OUT/run.log" | sed -E "s/^\{/{\"lib\": \"$lib\", /" >>"$C"
}
if [ "${PROC_ROUNDS:-2}" -gt 0 ]; then
  stamp "C++ plain, processes alternating (LIBS=$LIBS)"
  for round in $(seq 1 ${PROC_ROUNDS:-2}); do
    timeout -s KILL 60 "$B" --rounds=15 2>>"$OUT/run.log" | sed -E 's/^\{/{"lib": "none", /' >>"$C"
    for lib in $LIBS; do for s in none native; do rec $lib $s --rounds=15; done; done
  done
fi
if [ "${PARTS:-1}" = 1 ]; then
  stamp "C++ parts (with the profile line)"
  for lib in ${PARTS_LIBS:-$LIBS}; do for s in none native; do rec $lib $s --mode=parts --rounds=${PARTS_ROUNDS:-9}; done; done
fi
if [ "${RUNTIME:-1}" = 1 ]; then
  SP=$($PY -c 'import site;print(site.getsitepackages()[0])')
  export CUDART=$(find "$SP/nvidia" "$SP/torch/lib" -name 'libcudart.so.1*' 2>/dev/null | head -n 1)
  stamp "runtime calls (CUDART=$CUDART)"
  for round in 1 2; do
    timeout -s KILL 60 "$B" --mode=runtime --rounds=15 2>>"$OUT/run.log" | sed -E 's/^\{/{"lib": "none", /' >>"$C"
    for lib in $LIBS; do rec $lib none --mode=runtime --rounds=15; done
  done
fi
cat "$C"
S=$OUT/steps.jsonl; : >"$S"
# STEP_RUNS: "lib:seconds:config,config,... ..." -- one in-process A/B per entry, in turn.
for run in ${STEP_RUNS:-}; do
  IFS=: read -r lib secs configs <<<"$run"
  stamp "step A/B in-process, lib-$lib, python stacks, $secs s: $configs"
  rm -rf "$T/tr"
  LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=python LD_PRELOAD=$D/lib-$lib/liblockstep.so \
    timeout -s KILL $((secs + ${STEP_SLACK:-45})) $PY "$D/bench/step_overhead.py" --ab lockstep \
    --label "python-$lib-${SHAPE:-host}" --shape ${SHAPE:-host} --block 1 --settle 0 --shuffle 1 \
    --profile ${PROFILE:-1} --configs "$configs" --pairs 100000 \
    --seconds "$secs" >>"$S" 2>"$T/step.err"
  stamp "step rc=$? ($(wc -l <"$S") steps in all)"
  tail -n 20 "$T/step.err"
  trace_summary "step-$lib" | tee -a "$OUT/trace.txt"
done
if [ -n "${FR_PROCS:-}" ]; then
  stamp "Flight Recorder A/B: alternating child processes, ${FR_PROCS} per side, shape ${FR_SHAPE:-small}"
  timeout -s KILL ${FR_TIMEOUT:-200} $PY "$D/bench/step_overhead.py" --ab fr --label "fr-${FR_SHAPE:-small}" \
    --shape ${FR_SHAPE:-small} --procs "$FR_PROCS" --steps ${FR_STEPS:-10} --warmup 2 --seconds ${FR_SECONDS:-0} >>"$S" 2>"$T/fr.err"
  stamp "fr rc=$? ($(grep -c '"fr-' "$S") steps)"
  tail -n 20 "$T/fr.err"
fi
[ -s "$S" ] && timeout -s KILL 60 $PY "$D/bench/step_ratio.py" "$S" | tee "$OUT/step-table.md"
rm -rf "$T"
stamp done
