#!/usr/bin/env bash
# Where a PyTorch step under the recorder spends its CPU time, and how noisy the step A/B is.
#
#   dev box:  bash scripts/gpu/cost_suite.sh stage .carry/cost
#             bash scripts/gpu/step_profile.sh stage .carry/prof     # perf + its libraries, and
#                                                                    # the unstripped recorder
#   GPU:      bash scripts/gpu/step_profile.sh run .carry/cost .carry/prof    (writes under $OUT)
#
# 1. noise: the in-process A/B (recording vs paused, steps alternating in random order) with
#    Python's GC on and off, and pinned to 4 CPUs (NOISE_SECONDS each): ab-<variant>.jsonl.
# 2. profile: one process with the recorder recording, one paused (PERF_SECONDS each), each under
#    `perf record -e cpu-clock` (the GPU image has no perf: the dev box's is carried); the
#    samples per thread, per library and per symbol go to perf-<config>.txt.
# The GPU machine has no perf: when perf cannot open its events there, section 2 says so.
set -uo pipefail
cmd=${1:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$cmd" = stage ]; then
  P=${2:?dir}; set -e
  mkdir -p "$P/lib"
  cp "$(command -v perf)" "$P/perf"
  ldd "$(command -v perf)" | awk '{print $3}' | grep / | grep -v 'libc.so\|libm.so\|libpthread\|libdl.so\|librt.so' |
    xargs -I{} cp -L {} "$P/lib/"
  cp "$ROOT/build/lib/liblockstep.so" "$P/liblockstep.so"   # symbols kept
  du -sh "$P"; exit 0
fi
[ "$cmd" = run ] || { sed -n 2,15p "$0"; exit 2; }
D=$(cd "${2:?cost dir}" && pwd); P=$(cd "${3:?prof dir}" && pwd)
OUT=${OUT:-$ROOT/profile-out}; mkdir -p "$OUT"
NOISE_SECONDS=${NOISE_SECONDS:-45}; PERF_SECONDS=${PERF_SECONDS:-25}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
NCCL_WHEEL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
CUDART_LIB=$(python3 -c 'import nvidia.cuda_runtime, os; print(os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$D/lib:$NCCL_WHEEL_LIB:$CUDART_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
W=$(mktemp -d /tmp/step-profile.XXXXXX)
cd "$D/bin"
ab() {  # variant, extra step_overhead args, [prefix command]
  local v=$1 extra=$2; shift 2
  LOCKSTEP_DIR=$W/t-$v LD_PRELOAD=$P/liblockstep.so timeout -s KILL $((NOISE_SECONDS + 90)) "$@" \
    python3 step_overhead.py --ab lockstep --shape host --block 1 --settle 0 --shuffle 1 \
    --pairs 100000 --seconds "$NOISE_SECONDS" --configs recording,paused $extra \
    >"$OUT/ab-$v.jsonl" 2>"$W/ab-$v.err"; tail -2 "$W/ab-$v.err"
  rm -rf "$W/t-$v"
}
echo "== noise"
ab gc-on "--gc on"
ab gc-off "--gc off"
ab gc-off-pinned "--gc off" taskset -c 2-5
python3 step_ratio.py "$OUT"/ab-gc-on.jsonl >"$OUT/noise.md"
python3 step_ratio.py "$OUT"/ab-gc-off.jsonl | tail -n +3 >>"$OUT/noise.md"
python3 step_ratio.py "$OUT"/ab-gc-off-pinned.jsonl | tail -n +3 >>"$OUT/noise.md"
python3 - "$OUT" >>"$OUT/noise.md" <<'EOF'
import json, statistics, sys, collections
print("\n| variant | steps | step ms median | sd of paired difference, % | p10 / p90 step ms |")
print("|---|---|---|---|---|")
for v in ("gc-on", "gc-off", "gc-off-pinned"):
    pairs = collections.defaultdict(dict)
    ms = []
    for line in open(f"{sys.argv[1]}/ab-{v}.jsonl"):
        if line.startswith("{"):
            r = json.loads(line); pairs[r["pair"]][r["config"]] = r["ms"]; ms.append(r["ms"])
    d = [100 * (p["recording"] / p["paused"] - 1) for p in pairs.values() if len(p) == 2]
    if len(d) > 2:
        q = statistics.quantiles(ms, n=10)
        print(f"| {v} | {len(ms)} | {statistics.median(ms):.2f} | {statistics.stdev(d):.2f} | {q[0]:.1f} / {q[-1]:.1f} |")
EOF
cat "$OUT/noise.md"

echo "== profile"
PERF="env LD_LIBRARY_PATH=$P/lib LD_PRELOAD= $P/perf"   # its libraries for perf alone
for conf in recording paused; do
  LOCKSTEP_DIR=$W/t-perf timeout -s KILL $((PERF_SECONDS + 120)) \
    $PERF record -e cpu-clock -F 1999 -o "$W/perf-$conf.data" -- \
    env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" LD_PRELOAD="$P/liblockstep.so" python3 step_overhead.py --ab lockstep --shape host --block 1 --settle 0 --gc off \
    --pairs 100000 --seconds "$PERF_SECONDS" --configs "$conf" >"$W/perf-$conf.jsonl" 2>"$W/perf-$conf.err" ||
    { tail -5 "$W/perf-$conf.err"; continue; }
  { echo "# $conf: $(grep -c '^{' "$W/perf-$conf.jsonl") steps"
    $PERF report -i "$W/perf-$conf.data" --stdio --sort comm 2>/dev/null | grep -v '^#' | head -12
    $PERF report -i "$W/perf-$conf.data" --stdio --sort dso 2>/dev/null | grep -v '^#' | head -16
    $PERF report -i "$W/perf-$conf.data" --stdio --sort comm,dso,sym 2>/dev/null | grep -v '^#' | head -90
    echo "## liblockstep only"
    $PERF report -i "$W/perf-$conf.data" --stdio --dsos liblockstep.so --sort comm,sym 2>/dev/null | grep -v '^#' | head -60
  } >"$OUT/perf-$conf.txt" 2>&1
  rm -rf "$W/t-perf"
  head -40 "$OUT/perf-$conf.txt"
done
rm -rf "$W"
