#!/usr/bin/env bash
# The recorder's cost on one GPU, in one device call: C++ per-call figures for every build in LIBS
# (processes alternating), the hot path's parts, the runtime-call path's parts, the Flight
# Recorder A/B, and the in-process step-time A/B on the shapes in STEP_RUNS (arms in
# STEP_CONFIGS: recording, paused, and the LOCKSTEP_BENCH_OFF switches that idle a part);
# figures and the command used for them: docs/performance.md, docs/gpu.md. Writes
# under $OUT: run.log, machine.txt, c.jsonl (every C++ line), steps.jsonl (one line per timed
# step), step-table.md, trace.txt, analyze.txt (`lockstep analyze` on the traces produced).
#
#   COST_DIR=build-cost LIBS="main cov" STEP_RUNS="host:150 gpu:200" bash scripts/gpu/cost.sh
#
# COST_DIR: bin/nccl_call_overhead, bin/lockstep (the CLI), lib/ (libunwind.so.8),
# lib-<name>/liblockstep.so per build in LIBS, bench/ (step_overhead.py, step_ratio.py).
# C++ configurations (processes alternating within each round): no recorder; every lib in LIBS
# with per-op events and with LOCKSTEP_COMPLETION=covering. PARTS=1: lib-cov's parts
# (PARTS_LIST, nccl_call_overhead --parts) and a profile line per stack mode. RUNTIME=1: the
# runtime calls with the runtime path's parts (--wait-parts). Knobs: PROC_ROUNDS, PARTS=0|1,
# RUNTIME=0|1, STEP_RUNS ("shape:seconds[:profile] ...": one in-process A/B per entry, in a
# LOCKSTEP_COMPLETION=covering process of lib-$STEP_LIB, default cov), STEP_CONFIGS (its arms;
# HOST_CONFIGS: the host shape's, if set), THREADS=1 (per-thread CPU per step),
# FR_PROCS (children per side of the Flight Recorder A/B; empty: none), FR_SECONDS, FR_TIMEOUT,
# FR_STEPS, FR_SIZE (TORCH_FR_BUFFER_SIZE of the "fr" children, default 2000). Order: C++,
# runtime calls, the Flight Recorder A/B, then the step A/Bs (each stops starting pairs after its
# seconds): a time limit cuts the last step run short, not the Flight Recorder.
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
  for f in "$T"/tr/*.sqlite; do [ -f "$f" ] || continue; timeout -s KILL 60 $PY - "$f" "$1" <<'PYX'; done
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
out = {"run": sys.argv[2]}
for k, s in (("ops", "SELECT count(*) FROM ops"), ("completions", "SELECT count(*) FROM completions"),
             ("waits", "SELECT count(*) FROM waits"), ("stacks", "SELECT count(*) FROM stacks"),
             ("meta", "SELECT key, value FROM meta WHERE key IN ('completion_signal','completion_window','dropped_records',"
                      "'stack_mode','bench_off','hot_clock','recorder_stopped','unwinder','late_retired_ops','python_guard')")):
    try:
        r = db.execute(s).fetchall()
        out[k] = r[0][0] if k != "meta" else dict(r)
    except Exception as e:
        out[k] = f"error: {e}"
print("trace:", out)
PYX
}
# rec LIB COMPLETION STACKS ARGS...: one recorded run of the C++ benchmark, its JSON lines
# tagged with "lib" = LIB-COMPLETION.
rec() {
  local lib=$1 comp=$2 s=$3; shift 3
  rm -rf "$T/tr"
  LOCKSTEP_COMPLETION=$comp LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=$s LD_PRELOAD=$D/lib-$lib/liblockstep.so \
    timeout -s KILL 60 "$B" "$@" 2>>"$OUT/run.log" | sed -E "s/^\{/{\"lib\": \"$lib-$comp\", /" >>"$C"
  # Records the writer dropped (its queue full) in this process's trace, and its ops rows.
  for f in "$T"/tr/*.sqlite; do [ -f "$f" ] || continue; timeout -s KILL 30 $PY -c '
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
m = dict(db.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", ("dropped_records", "late_retired_ops")))
print(json.dumps({"drops": sys.argv[2], "args": sys.argv[3], "ops": db.execute("SELECT count(*) FROM ops").fetchone()[0], **m}))' \
    "$f" "$lib-$comp-$s" "$*" >>"$OUT/trace.txt" 2>&1; done
}
analyze() {  # LABEL DIR: lockstep analyze (text and JSON verdict) on a trace directory, into analyze.txt
  { echo "== $1: lockstep analyze $2"; timeout -s KILL 120 "$D/bin/lockstep" analyze "$2" 2>&1 | head -n 60
    echo "exit: ${PIPESTATUS[0]}"
    timeout -s KILL 120 "$D/bin/lockstep" analyze --json "$2" 2>/dev/null | $PY -c '
import json, sys
d = json.load(sys.stdin)
print("json:", {k: d.get(k) for k in ("verdict", "clean", "summary", "evidence")})' 2>&1; } >"$T/analyze.txt" 2>&1
  cat "$T/analyze.txt" | tee -a "$OUT/analyze.txt"
}
if [ "${PROC_ROUNDS:-3}" -gt 0 ]; then
  stamp "C++ plain, processes alternating (LIBS=$LIBS, event and covering)"
  for round in $(seq 1 ${PROC_ROUNDS:-3}); do
    timeout -s KILL 60 "$B" --rounds=15 2>>"$OUT/run.log" | sed -E 's/^\{/{"lib": "none", /' >>"$C"
    for s in none native; do
      for lib in $LIBS; do rec $lib event $s --rounds=15; rec $lib covering $s --rounds=15; done
    done
  done
  trace_summary "c-cov-covering-native" | tee -a "$OUT/trace.txt"
  analyze c-covering "$T/tr"
fi
if [ "${PARTS:-1}" = 1 ]; then
  stamp "C++ parts of lib-cov (${PARTS_LIST:-stack,event,queue}; with the profile line)"
  for s in native none; do
    rec cov covering $s --mode=parts --rounds=${PARTS_ROUNDS:-7} --parts=${PARTS_LIST:-stack,event,queue}
  done
fi
if [ "${RUNTIME:-1}" = 1 ]; then
  SP=$($PY -c 'import site;print(site.getsitepackages()[0])')
  export CUDART=$(find "$SP/nvidia" "$SP/torch/lib" -name 'libcudart.so.1*' 2>/dev/null | head -n 1)
  stamp "runtime calls (CUDART=$CUDART)"
  for round in 1 2; do
    timeout -s KILL 60 "$B" --mode=runtime --rounds=15 2>>"$OUT/run.log" | sed -E 's/^\{/{"lib": "none", /' >>"$C"
    for lib in $LIBS; do
      if [ $lib = cov ]; then rec $lib covering none --mode=runtime --rounds=15 --wait-parts
      else rec $lib covering none --mode=runtime --rounds=15; fi
    done
  done
fi
cat "$C"
S=$OUT/steps.jsonl; : >"$S"
if [ -n "${FR_PROCS:-}" ]; then
  stamp "Flight Recorder A/B: alternating child processes, ${FR_PROCS} per side, shape ${FR_SHAPE:-small}"
  timeout -s KILL ${FR_TIMEOUT:-200} $PY "$D/bench/step_overhead.py" --ab fr --label "fr-${FR_SHAPE:-small}" \
    --shape ${FR_SHAPE:-small} --procs "$FR_PROCS" --steps ${FR_STEPS:-10} --warmup 2 --seconds ${FR_SECONDS:-0} \
    --fr-size ${FR_SIZE:-2000} >>"$S" 2>"$T/fr.err"
  stamp "fr rc=$? ($(grep -c '"fr-' "$S") steps)"
  tail -n 20 "$T/fr.err"
fi
SL=${STEP_LIB:-cov}
for run in ${STEP_RUNS:-}; do
  shape=${run%%:*}; secs=${run#*:}; prof=${PROFILE:-1}
  case $secs in *:*) prof=${secs#*:}; secs=${secs%%:*};; esac  # "shape:seconds:profile"
  configs=${STEP_CONFIGS:-recording,event-per-op,paused}
  if [ "$shape" = host ] && [ -n "${HOST_CONFIGS:-}" ]; then configs=$HOST_CONFIGS; fi
  stamp "step A/B in-process, lib-$SL, LOCKSTEP_COMPLETION=covering, python stacks, shape $shape, $secs s: $configs"
  rm -rf "$T/tr"
  LOCKSTEP_COMPLETION=covering LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=python LD_PRELOAD=$D/lib-$SL/liblockstep.so \
    timeout -s KILL $((secs + ${STEP_SLACK:-50})) $PY "$D/bench/step_overhead.py" --ab lockstep \
    --label "python-$SL-$shape" --shape $shape --block 1 --settle 0 --shuffle 1 \
    --profile $prof --threads $([ "$prof" = 1 ] && echo ${THREADS:-1} || echo 0) --configs "$configs" --pairs 100000 \
    --seconds "$secs" >>"$S" 2>"$T/step.err"
  stamp "step rc=$? ($(grep -c "python-$SL-$shape" "$S") steps of shape $shape)"
  tail -n 20 "$T/step.err"
  trace_summary "step-$shape" | tee -a "$OUT/trace.txt"
  analyze "step-$shape" "$T/tr"
done
[ -s "$S" ] && timeout -s KILL 60 $PY "$D/bench/step_ratio.py" "$S" | tee "$OUT/step-table.md"
rm -rf "$T"
stamp done
