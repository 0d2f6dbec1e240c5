#!/usr/bin/env bash
# How NCCL is reached, on a GPU machine (docs/recorder.md "How NCCL is reached"):
#  (a) a ctypes pynccl-style program (tests/reach/pynccl_ctypes.py: CDLL(libnccl.so.2), RTLD_LOCAL,
#      calls through the handle, as vLLM's/SGLang's pynccl) under `lockstep run --stacks python`
#      against the torch wheel's libnccl.so.2: 1 rank, and 2 ranks when 2 GPUs are visible; the
#      trace must hold every all_reduce, completed, with its Python frames;
#  (b) examples/torch/collectives.py traced through NCCL's profiler plugin alone
#      (NCCL_PROFILER_PLUGIN=liblockstep.so, no LD_PRELOAD) and through both, with
#      `lockstep analyze` (coverage report) and a comparison of the two traces: on 2 GPUs
#      (torchrun, 2 ranks) the same ops; on 1 GPU only p2p ops (NCCL 2.28 gives the plugin no
#      event for a collective on a 1-rank communicator).
#
#   OUT=/path scripts/gpu/reach.sh     # needs build-gpu/ (as scripts/gpu-check.sh builds it)
#
# Every step runs under `timeout -s KILL`; logs and traces go to $OUT; summary in $OUT/reach.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
SUMMARY=$OUT/reach.md
PY=${PYTHON:-python3}
T=${STEP_TIMEOUT:-300}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
[ -d "$ROOT/.carry/lib" ] && export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

BUILD=${BUILD_DIR:-$ROOT/build-gpu}
if [ ! -x "$BUILD/bin/lockstep" ] || [ ! -f "$BUILD/lib/liblockstep.so" ]; then
  timeout -s KILL 900 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_BUILD_TESTS=OFF \
      -DLOCKSTEP_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$ROOT/.carry" >"$OUT/reach-build.log" 2>&1 &&
  timeout -s KILL 900 cmake --build "$BUILD" -j"$(nproc)" --target lockstep lockstep_cli \
      >>"$OUT/reach-build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/reach-build.log"; exit 1; }
fi
LS=$BUILD/bin/lockstep
LIB=$BUILD/lib/liblockstep.so

pass=0; fail=0; skip=0
step() {  # step NAME CMD... : runs CMD under timeout -s KILL, logs to $OUT/reach-NAME.log
  local name=$1; shift
  timeout -s KILL "$T" "$@" >"$OUT/reach-$name.log" 2>&1; local rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "- [x] $name" >>"$SUMMARY"
  else fail=$((fail+1)); echo "- [ ] $name: exit $rc, see reach-$name.log" >>"$SUMMARY"; fi
  echo "== $name: rc=$rc"; tail -n 30 "$OUT/reach-$name.log"
  return $rc
}
skipped() { skip=$((skip+1)); echo "- [-] $1: skipped ($2)" >>"$SUMMARY"; echo "== $1: skipped ($2)"; }

NCCL_SO=$(timeout -s KILL 120 $PY -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
{ echo "# lockstep: how NCCL is reached ($(date -u +%F))"; echo
  echo "- libnccl: ${NCCL_SO:-not found}; GPUs: $NGPU"; echo; } >"$SUMMARY"

# A trace check: every rank's file holds STEPS completed all_reduces, each with the Python frames
# PyNcclCommunicator.all_reduce -> run_step, and meta nccl_reached naming dlsym.
cat >"$OUT/reach_check.py" <<'PYEOF'
import glob, os, sqlite3, sys
trace, steps, nranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = glob.glob(os.path.join(trace, "*.sqlite"))
assert len(files) == nranks, "trace files: %r" % files
for f in files:
    db = sqlite3.connect(f)
    meta = dict(db.execute("SELECT key, value FROM meta"))
    print(f, "nccl_reached=%s" % meta.get("nccl_reached"), "nccl_libraries=%s" % meta.get("nccl_libraries"))
    assert "dlsym" in meta.get("nccl_reached", "").split(","), meta.get("nccl_reached")
    ops = db.execute("SELECT o.seq, o.op, c.call_index IS NOT NULL FROM ops o LEFT JOIN completions c "
                     "ON c.call_index = o.call_index ORDER BY o.seq").fetchall()
    assert ops == [(s, "all_reduce", 1) for s in range(1, steps + 1)], ops
    for seq, fns in db.execute(
            "SELECT o.seq, group_concat(f.function, ' <- ') FROM ops o JOIN frames f ON f.stack_id = o.stack_id "
            "WHERE f.kind = 'python' GROUP BY o.seq ORDER BY o.seq"):
        assert fns.startswith("PyNcclCommunicator.all_reduce <- run_step"), (seq, fns)
    n = db.execute("SELECT count(DISTINCT o.seq) FROM ops o JOIN frames f ON f.stack_id = o.stack_id "
                   "WHERE f.kind = 'python'").fetchone()[0]
    assert n == steps, "ops with python frames: %d of %d" % (n, steps)
print("ok")
PYEOF

# (a) ctypes pynccl
if [ -z "$NCCL_SO" ] || [ ! -f "$NCCL_SO" ]; then
  skipped ctypes-1rank "no nvidia.nccl wheel"
else
  rm -rf "$OUT/t-ctypes1" "$OUT/ctypes1.id"
  step ctypes-1rank env RANK=0 "$LS" run -o "$OUT/t-ctypes1" --stacks python -- \
      $PY tests/reach/pynccl_ctypes.py --nccl "$NCCL_SO" --rank 0 --nranks 1 \
      --id-file "$OUT/ctypes1.id" --steps 10
  step ctypes-1rank-check $PY "$OUT/reach_check.py" "$OUT/t-ctypes1" 10 1
  step ctypes-1rank-analyze "$LS" analyze "$OUT/t-ctypes1"
  if [ "$NGPU" -ge 2 ]; then
    rm -rf "$OUT/t-ctypes2" "$OUT/ctypes2.id"
    # timeout runs programs, not shell functions: the two ranks are a script of their own
    cat >"$OUT/reach-two-ranks.sh" <<SHEOF
pids=
for r in 0 1; do
  RANK=\$r "$LS" run -o "$OUT/t-ctypes2" --stacks python -- $PY tests/reach/pynccl_ctypes.py \\
    --nccl "$NCCL_SO" --rank \$r --nranks 2 --device \$r --id-file "$OUT/ctypes2.id" --steps 10 &
  pids="\$pids \$!"
done
rc=0; for p in \$pids; do wait \$p || rc=1; done; exit \$rc
SHEOF
    step ctypes-2ranks bash "$OUT/reach-two-ranks.sh"
    step ctypes-2ranks-check $PY "$OUT/reach_check.py" "$OUT/t-ctypes2" 10 2
    step ctypes-2ranks-analyze "$LS" analyze "$OUT/t-ctypes2"
  else
    skipped ctypes-2ranks "one GPU (NCCL refuses two ranks on one device)"
  fi
fi

# (b) NCCL's profiler plugin. NCCL 2.28 emits no profiler event for a collective on a 1-rank
# communicator (enqueue.cc taskAppend: ncclLaunchOneRank), so the comparison needs 2 GPUs; on one
# GPU the runs still show that the plugin is loaded and records nothing it was not told.
cat >"$OUT/reach_plugin_check.py" <<'PYEOF'
import glob, os, sqlite3, sys
plugin_dir, both_dir, nranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(d):
    out = {}
    for f in glob.glob(os.path.join(d, "*.sqlite")):
        db = sqlite3.connect(f)
        meta = dict(db.execute("SELECT key, value FROM meta"))
        ops = db.execute("SELECT op, dtype, count, root FROM ops WHERE seq IS NOT NULL ORDER BY call_index").fetchall()
        seen = dict(db.execute("SELECT seen_by, count(*) FROM profiler_ops GROUP BY 1").fetchall())
        out[int(meta.get("global_rank", -1))] = (meta, ops, seen)
    return out
p, b = load(plugin_dir), load(both_dir)
assert len(p) == nranks and len(b) == nranks, (sorted(p), sorted(b))
for r in sorted(b):
    (pm, pops, pseen), (bm, bops, bseen) = p[r], b[r]
    print("rank %d: plugin-only %d ops %s (meta %s), both %d ops %s" % (r, len(pops), pseen,
          {k: pm.get(k) for k in ("profiler_plugin", "interposer_preloaded", "nccl_reached")}, len(bops), bseen))
    assert pm.get("profiler_plugin") == "ncclProfiler_v5" and pm.get("interposer_preloaded") == "0", pm
    assert bm.get("profiler_plugin") == "ncclProfiler_v5" and bm.get("interposer_preloaded") == "1", bm
    assert set(bseen) <= {"both"}, bseen            # coverage: the interposer saw every call
    assert set(pseen) <= {"plugin"}, pseen
    if nranks == 1:  # collectives on a 1-rank communicator give the plugin no event
        assert len(pops) <= len(bops), (pops, bops)
        continue
    assert len(pops) == len(bops), "plugin-only %d ops, interposer %d:\n%s\n%s" % (len(pops), len(bops), pops, bops)
    for i, (po, bo) in enumerate(zip(pops, bops)):
        if po == bo:
            continue
        # What the plugin cannot know (docs/recorder.md): NCCL turns ncclAlltoAll / Gather /
        # Scatter into sends and receives before telling the plugin; NCCL 2.28 names no uint8.
        p2p_view = bo[0] in ("all_to_all", "gather", "scatter") and po[0] in ("all_to_all", "send_recv", "send", "recv")
        dtype_unknown = po[1] is None and po[0] == bo[0] and po[2:] == bo[2:]
        print("  seq %d: plugin %s, interposer %s%s" % (i + 1, po, bo, " (expected)" if p2p_view or dtype_unknown else ""))
        assert p2p_view or dtype_unknown, "plugin-only op %d differs" % (i + 1)
print("ok")
PYEOF
if nm -D --defined-only "$LIB" 2>/dev/null | grep -q ' ncclProfiler_v'; then
  NR=1; [ "$NGPU" -ge 2 ] && NR=2
  export MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29531}
  # reach-torch.sh CMD-PREFIX...: examples/torch/collectives.py on $NR ranks (a script: timeout
  # runs programs, not shell functions)
  cat >"$OUT/reach-torch.sh" <<SHEOF
if [ $NR -eq 1 ]; then RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 exec "\$@" $PY examples/torch/collectives.py
else exec "\$@" $PY -m torch.distributed.run --standalone --nproc-per-node $NR examples/torch/collectives.py; fi
SHEOF
  rm -rf "$OUT/t-plugin" "$OUT/t-both"
  step torch-plugin-only bash "$OUT/reach-torch.sh" env NCCL_PROFILER_PLUGIN="$LIB" LOCKSTEP_DIR="$OUT/t-plugin" \
      LOCKSTEP_STACKS=python
  step torch-plugin-only-analyze "$LS" analyze "$OUT/t-plugin"
  step torch-plugin-only-doctor "$LS" doctor "$OUT/t-plugin"
  step torch-both bash "$OUT/reach-torch.sh" env NCCL_PROFILER_PLUGIN="$LIB" "$LS" run -o "$OUT/t-both" --stacks python --
  step torch-both-analyze "$LS" analyze "$OUT/t-both"
  step torch-plugin-compare $PY "$OUT/reach_plugin_check.py" "$OUT/t-plugin" "$OUT/t-both" "$NR"
else
  skipped torch-profiler-plugin "this liblockstep exports no ncclProfiler_v* (not built yet)"
fi

echo >>"$SUMMARY"; echo "passed $pass, failed $fail, skipped $skip" >>"$SUMMARY"
cat "$SUMMARY"
[ $fail -eq 0 ]
