#!/usr/bin/env bash
# Every figure of docs/performance.md in one GPU call (issue 31), from prebuilt binaries.
#
#   dev box:  bash scripts/gpu/cost_suite.sh stage DIR [BASE_LIB]
#     strips ./build's liblockstep.so and CLI into DIR, builds bench/nccl_call_overhead against
#     /usr/local/cuda, copies libunwind.so.8 (+ liblzma) and, when NCCL_TESTS_BUILD names an
#     nccl-tests build folder, its all_reduce_perf and sendrecv_perf; BASE_LIB (optional): a
#     second liblockstep.so for "before" rows (e.g. the previous main). The GPU machine has no
#     libunwind, no sqlite3/xxhash headers: build here, carry DIR.
#   GPU:      bash scripts/gpu/cost_suite.sh run DIR      (writes under $OUT)
#     1. C++ per call (nccl_call_overhead, 8-byte ncclAllReduce and a grouped ncclSend+ncclRecv
#        pair): no recorder, then each library x stacks none/native, processes alternating
#        (PROC_ROUNDS rounds);
#     2. nccl-tests in place, world size 1 (all_reduce_perf, sendrecv_perf), no recorder vs each
#        library (stacks none and native), alternating (NT_ROUNDS rounds);
#     3. per-component costs under PyTorch: step_overhead.py --ab lockstep --profile 1, host shape,
#        configurations rotating step by step (PARTS_SECONDS);
#     3b. the step cost resolved: --ab lockstep, recording vs paused, no counters (AB_SECONDS);
#     4. the four-arm table: step_overhead.py --ab four, host shape (FOUR_SECONDS; --procs big
#        enough that time, not count, ends it).
#   Logs: $OUT/c.jsonl (1), $OUT/nccl-tests.txt (2), $OUT/parts.jsonl (3), $OUT/ab.jsonl (3b),
#   $OUT/four.jsonl (4), $OUT/*-table.md, $OUT/tables.md (every table), $OUT/trace.txt,
#   $OUT/machine.txt. $OUT holds more than 8 files: on the device tool, tar it (see
#   docs/performance.md for the exact call).
set -uo pipefail
cmd=${1:-}; D=${2:-}
[ -n "$cmd" ] && [ -n "$D" ] || { sed -n 2,25p "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

if [ "$cmd" = stage ]; then
  set -e
  mkdir -p "$D"/{bin,lib,lib-new}
  strip -o "$D/lib-new/liblockstep.so" "$ROOT/build/lib/liblockstep.so"
  [ -x "$ROOT/build/bin/lockstep" ] && strip -o "$D/bin/lockstep" "$ROOT/build/bin/lockstep"
  if [ -n "${3:-}" ]; then mkdir -p "$D/lib-base"; strip -o "$D/lib-base/liblockstep.so" "$3"; fi
  g++ -std=c++20 -O2 -I/usr/local/cuda/include "$ROOT/bench/nccl_call_overhead.cpp" \
      -o "$D/bin/nccl_call_overhead" -L/usr/local/cuda/lib64/stubs -lcuda -L/usr/local/cuda/lib64 -lnccl -ldl
  cp -L /usr/lib/x86_64-linux-gnu/libunwind.so.8 /lib/x86_64-linux-gnu/liblzma.so.5 "$D/lib/"
  # The CLI's allocator when it was built with one (cli/CMakeLists.txt): the GPU image has none.
  for l in $(ldd "$ROOT/build/bin/lockstep" | awk '/libmimalloc/ {print $3}'); do cp -L "$l" "$D/lib/"; done
  if [ -n "${NCCL_TESTS_BUILD:-}" ]; then
    for t in all_reduce_perf sendrecv_perf; do strip -o "$D/bin/$t" "$NCCL_TESTS_BUILD/$t"; done
  fi
  cp "$ROOT"/bench/{step_overhead.py,four_arm.py,step_ratio.py} "$D/bin/"
  ls -la "$D"/*
  exit 0
fi
[ "$cmd" = run ] || { echo "unknown command $cmd"; exit 2; }

D=$(cd "$D" && pwd)
OUT=${OUT:-$ROOT/cost-out}; mkdir -p "$OUT"
PROC_ROUNDS=${PROC_ROUNDS:-2}; NT_ROUNDS=${NT_ROUNDS:-2}
PARTS_SECONDS=${PARTS_SECONDS:-40}; AB_SECONDS=${AB_SECONDS:-100}
SECTIONS=${SECTIONS:-"c nt parts ab four"}   # which sections run (a subset for a quick check)
on() { [[ " $SECTIONS " == *" $1 "* ]]; }
FOUR_SECONDS=${FOUR_SECONDS:-130}; FOUR_STEPS=${FOUR_STEPS:-25}
PARTS_CONFIGS=${PARTS_CONFIGS:-recording,own-event,py-walk,no-memo,no-stacks,paused}
# The A/B's arms (the step cost resolved: recording vs paused; more arms split it, e.g.
# recording,writer-idle,no-waits,paused) and AB_THREADS=1: per-thread CPU time of each step.
AB_CONFIGS=${AB_CONFIGS:-recording,paused}; AB_THREADS=${AB_THREADS:-0}
# The step's noise, the same for every arm: PIN=2-5 runs the PyTorch sections under taskset;
# STEP_GC=off disables Python's GC after warm-up; OPENBLAS_NUM_THREADS=1 (set here) keeps
# scipy's OpenBLAS from parking spinning threads beside the step (5 % of the samples: perf).
STEP_GC=${STEP_GC:-on}
PIN_CMD=(); [ -n "${PIN:-}" ] && PIN_CMD=(taskset -c "$PIN")
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCCL_WHEEL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
CUDART_LIB=$(python3 -c 'import nvidia.cuda_runtime, os; print(os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$NCCL_WHEEL_LIB:$CUDART_LIB"
LIBS=$(cd "$D" && ls -d lib-* | sed 's/^lib-//' | sort -r | tr '\n' ' ')   # new, then base
W=$(mktemp -d /tmp/cost-suite.XXXXXX)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uname -r
  python3 -c 'import sys,torch; print("python", sys.version.split()[0], "torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  for l in $LIBS; do md5sum "$D/lib-$l/liblockstep.so"; done; date -u; } >"$OUT/machine.txt" 2>&1
t_start=$(date +%s)
# The arms of each library in sections 1 and 2: stacks none and native; COVERING=1 adds
# "none+covering" and "native+covering" for the new library (LOCKSTEP_COMPLETION=covering: the
# opt-in signal).
arms_of() { echo none native; [ "${COVERING:-0}" = 1 ] && [ "$1" = new ] && echo none+covering native+covering; }
say() { echo "== $* ($(( $(date +%s) - t_start )) s)"; }

# 1. C++ per call
say "C++ per call"
B=$D/bin/nccl_call_overhead
on c || PROC_ROUNDS=0
for r in $(seq 1 "$PROC_ROUNDS"); do
  for op in allreduce sendrecv; do
    timeout -s KILL 60 "$B" --op=$op --rounds=11 >>"$OUT/c.jsonl" 2>>"$W/c.err"
    for l in $LIBS; do for arm in $(arms_of "$l"); do
      st=${arm%%+*}; comp=event; [ "$arm" = "$st" ] || comp=${arm#*+}
      LOCKSTEP_DIR=$W/t-$l LOCKSTEP_STACKS=$st LOCKSTEP_COMPLETION=$comp LD_PRELOAD=$D/lib-$l/liblockstep.so \
        timeout -s KILL 60 "$B" --op=$op --rounds=11 | sed "s/^{/{\"lib\": \"$l\", /; s/\"stacks\": \"$st\"/\"stacks\": \"$arm\"/" >>"$OUT/c.jsonl" 2>>"$W/c.err"
    done; done
  done
done
python3 - "$OUT/c.jsonl" >"$OUT/c-table.md" <<'EOF'
import json, sys, statistics
rows = {}
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    r = json.loads(line)
    key = (r["op"], r.get("lib", "no recorder"), r["stacks"] if "lib" in r else "")
    rows.setdefault(key, []).append(r["median_ns"])
print("| op | library | stacks | ns per call (median of processes) | added | each process |")
print("|---|---|---|---|---|---|")
for op in ("allreduce", "sendrecv"):
    base = statistics.median(rows.get((op, "no recorder", ""), [0]))
    for (o, lib, st), v in sorted(rows.items()):
        if o != op: continue
        m = statistics.median(v)
        add = "" if lib == "no recorder" else f"{m - base:+.0f}"
        print(f"| {op} | {lib} | {st} | {m:.0f} | {add} | {', '.join(f'{x:.0f}' for x in v)} |")
EOF
cat "$OUT/c-table.md"

# 2. nccl-tests in place (world size 1: the host's issue cost)
if [ -x "$D/bin/all_reduce_perf" ] && on nt; then
  say "nccl-tests"
  for r in $(seq 1 "$NT_ROUNDS"); do
    for t in all_reduce_perf sendrecv_perf; do
      for arm in none $(for l in $LIBS; do for a in $(arms_of "$l"); do echo "$l:$a"; done; done); do
        pre=""; st=""; comp=event
        if [ "$arm" != none ]; then
          pre=$D/lib-${arm%%:*}/liblockstep.so; st=${arm##*:}
          [ "${st#*+}" = "$st" ] || { comp=${st#*+}; st=${st%%+*}; }
        fi
        echo "### $t $arm round $r" >>"$OUT/nccl-tests.txt"
        LOCKSTEP_DIR=$W/nt LOCKSTEP_STACKS=${st:-none} LOCKSTEP_COMPLETION=$comp LD_PRELOAD=$pre timeout -s KILL 60 \
          "$D/bin/$t" -b 8 -e 1M -f 8 -g 1 -n 500 -w 20 >>"$OUT/nccl-tests.txt" 2>&1
        rm -rf "$W/nt"
      done
    done
  done
  python3 - "$OUT/nccl-tests.txt" >"$OUT/nt-table.md" <<'EOF'
import re, sys, statistics
cur, data = None, {}
for line in open(sys.argv[1]):
    m = re.match(r"### (\S+) (\S+) round", line)
    if m: cur = (m.group(1), m.group(2)); continue
    f = line.split()
    if cur and len(f) >= 12 and f[0].isdigit():
        # size count type redop root | out-of-place time algbw busbw #wrong | in-place time algbw busbw #wrong
        data.setdefault(cur, {}).setdefault(int(f[0]), []).append((float(f[-8]), float(f[-4])))
for t in sorted({k[0] for k in data}):
    arms = [k[1] for k in data if k[0] == t]
    arms = ["none"] + sorted(a for a in arms if a != "none")
    print(f"\n{t}: in-place time, µs (median of rounds; in brackets out-of-place)\n")
    print("| bytes | " + " | ".join(arms) + " |"); print("|---" * (len(arms) + 1) + "|")
    for size in sorted(data.get((t, "none"), {})):
        cells = []
        for a in arms:
            v = data.get((t, a), {}).get(size, [])
            cells.append(f"{statistics.median(x[1] for x in v):.2f} ({statistics.median(x[0] for x in v):.2f})" if v else "")
        print(f"| {size} | " + " | ".join(cells) + " |")
EOF
  cat "$OUT/nt-table.md"
fi

# 3. Per-component costs under PyTorch (profile counters; new library)
cd "$D/bin"
if on parts; then
say "parts under PyTorch"
LOCKSTEP_DIR=$W/t-parts LD_PRELOAD=$D/lib-new/liblockstep.so timeout -s KILL $((PARTS_SECONDS + 90)) \
  "${PIN_CMD[@]}" python3 step_overhead.py --ab lockstep --shape host --block 1 --settle 0 --shuffle 1 --profile 1 \
  --gc "$STEP_GC" --pairs 100000 --seconds "$PARTS_SECONDS" --configs "$PARTS_CONFIGS" \
  >"$OUT/parts.jsonl" 2>"$W/parts.err"; tail -3 "$W/parts.err"
python3 step_ratio.py "$OUT/parts.jsonl" >"$OUT/parts-table.md" 2>&1; cat "$OUT/parts-table.md"
python3 - "$OUT/parts.jsonl" >>"$OUT/parts-table.md" <<'EOF'
import json, sys, statistics
by = {}
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    r = json.loads(line)
    if "counters" in r: by.setdefault(r["config"], []).append(r["counters"])
print("\nµs per step inside the hooks (profile counters, mean over steps; TSC ticks / GHz):\n")
keys = ["op_begin_ticks", "unwind_ticks", "python_ticks", "capture_ticks", "submit_ticks",
        "op_end_ticks", "event_ticks", "event_record_ticks", "row_push_ticks", "wait_ticks",
        "settle_ticks"]
print("| config | steps | ops | waits | unwinds | settle queries | " + " | ".join(k.replace("_ticks", "") for k in keys) + " |")
print("|---" * (len(keys) + 6) + "|")
for c, rs in by.items():
    ghz = 2.1e3  # ticks per µs; the TSC rate is printed per step in tsc below when known
    ticks = lambda k: statistics.mean(r.get(k, 0) for r in rs) / ghz
    print(f"| {c} | {len(rs)} | {statistics.mean(r['ops'] for r in rs):.0f} | "
          f"{statistics.mean(r.get('waits', 0) for r in rs):.0f} | "
          f"{statistics.mean(r.get('unwinds', 0) for r in rs):.1f} | "
          f"{statistics.mean(r.get('settle_queries', 0) for r in rs):.1f} | " + " | ".join(f"{ticks(k):.0f}" for k in keys) + " |")
EOF
tail -8 "$OUT/parts-table.md"
fi

# 3b. The step cost, resolved: in-process A/B (new library, Python stacks, no counters), steps
# alternating one by one in a new random order each pair
if on ab; then
say "step A/B"
LOCKSTEP_DIR=$W/t-ab LD_PRELOAD=$D/lib-new/liblockstep.so timeout -s KILL $((AB_SECONDS + 90)) \
  "${PIN_CMD[@]}" python3 step_overhead.py --ab lockstep --shape host --block 1 --settle 0 --shuffle 1 \
  --gc "$STEP_GC" --pairs 100000 --seconds "$AB_SECONDS" --configs "$AB_CONFIGS" --threads "$AB_THREADS" \
  >"$OUT/ab.jsonl" 2>"$W/ab.err"; tail -3 "$W/ab.err"
python3 step_ratio.py "$OUT/ab.jsonl" >"$OUT/ab-table.md" 2>&1; head -4 "$OUT/ab-table.md"
[ "$AB_THREADS" = 1 ] && python3 - "$OUT/ab.jsonl" >>"$OUT/ab-table.md" <<'EOF'
import json, sys, statistics
by = {}
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    r = json.loads(line)
    for name, (run, wait, slices) in r.get("threads", {}).items():
        by.setdefault(name, {}).setdefault(r["config"], []).append((run, wait))
print("\nµs per step by thread (schedstat: on a CPU / runnable, waiting for one), median over steps:\n")
configs = sorted({c for v in by.values() for c in v})
print("| thread | " + " | ".join(configs) + " |"); print("|---" * (len(configs) + 1) + "|")
for name in sorted(by, key=lambda n: -statistics.median(x[0] for x in by[n].get("paused", [(0, 0)]))):
    cells = []
    for c in configs:
        v = by[name].get(c, [])
        cells.append(f"{statistics.median(x[0] for x in v):.0f} / {statistics.median(x[1] for x in v):.0f}" if v else "")
    print(f"| {name} | " + " | ".join(cells) + " |")
EOF
fi

# 4. The four arms
if on four; then
say "four arms"
LOCKSTEP_DIR=$W/t-four LD_PRELOAD=$D/lib-new/liblockstep.so timeout -s KILL $((FOUR_SECONDS + 60)) \
  "${PIN_CMD[@]}" python3 step_overhead.py --ab four --gc "$STEP_GC" --shape host --procs 1000 --steps "$FOUR_STEPS" --warmup 3 \
  --seconds "$FOUR_SECONDS" >"$OUT/four.jsonl" 2>"$W/four.err"; tail -3 "$W/four.err"
python3 four_arm.py "$OUT/four.jsonl" >"$OUT/four-table.md" 2>&1; cat "$OUT/four-table.md"
fi
# The A/B process's trace (it exits normally; the four-arm children end with os._exit and
# write no exit meta): the memo's counters (meta native_stack_memo), guard, drops.
t=$(ls -d "$W"/t-ab/* "$W"/t-parts/* 2>/dev/null | tail -1)
if [ -n "$t" ]; then
  python3 - "$W" >"$OUT/trace.txt" 2>&1 <<'EOF'
import glob, os, sqlite3, sys
for p in sorted(glob.glob(sys.argv[1] + "/t-ab/*.sqlite") + glob.glob(sys.argv[1] + "/t-parts/*.sqlite"))[-3:]:
    db = sqlite3.connect(p)
    meta = dict(db.execute("select key, value from meta"))
    print(p, os.path.getsize(p), "bytes", db.execute("select count(*) from ops").fetchone()[0], "ops",
          db.execute("select count(*) from stacks").fetchone()[0], "stacks",
          dict(db.execute("select kind, count(*) from waits group by kind")), "waits rows",
          {k: meta.get(k) for k in ("stack_mode", "native_stack_memo", "python_guard", "completion_adopted", "dropped_records", "bench_off")})
EOF
  cat "$OUT/trace.txt"
fi
cat "$OUT"/c-table.md "$OUT"/nt-table.md "$OUT"/parts-table.md "$OUT"/ab-table.md "$OUT"/four-table.md \
  >"$OUT/tables.md" 2>/dev/null
say "done"
rm -rf "$W"
