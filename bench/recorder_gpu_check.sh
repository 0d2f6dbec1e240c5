#!/usr/bin/env bash
# The recorder alone on a GPU machine with PyTorch + real NCCL (docs/recorder.md, "Validated on
# the GPU machine"): no lockstep CLI needed, only liblockstep.so (built elsewhere is fine: it
# needs glibc >= 2.34, libstdc++ and libsqlite3.so.0) and optionally libunwind.so.8, both in
# $LIBDIR. Results and logs under $OUT (default ./gpu-recorder-out).
#   bench/recorder_gpu_check.sh LIBDIR          # world size 1 checks + overhead
#   NGPUS=2 bench/recorder_gpu_check.sh LIBDIR  # also the seed (FSDP2 + Ulysses --broken) on 2 GPUs
set -u
cd "$(dirname "$0")/.."
G=$(cd "${1:?usage: recorder_gpu_check.sh LIBDIR}" && pwd)
O=${OUT:-$PWD/gpu-recorder-out}
mkdir -p "$O"
export LD_LIBRARY_PATH=$G${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
PRE="env LD_PRELOAD=$G/liblockstep.so"
python3 -c 'import torch,sys; print("python", sys.version.split()[0], "torch", torch.__version__, "nccl", torch.cuda.nccl.version())'

( export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511
  echo "== collectives (op, dtype, count, Python function and line, completions)"
  $PRE LOCKSTEP_DIR=$O/t-coll timeout 300 python3 examples/torch/collectives.py --expect $O/coll-expect.json >$O/coll.log 2>&1
  echo "rc=$?"
  python3 scripts/gpu/check_trace.py collectives $O/t-coll $O/coll-expect.json
  echo "== cuda graph (captured ops counted at every replay)"
  $PRE LOCKSTEP_DIR=$O/t-graph timeout 300 python3 examples/torch/cuda_graph.py --replays 5 >$O/graph.log 2>&1
  echo "rc=$?"
  grep '^{' $O/graph.log | tail -1 >$O/graph-result.json
  python3 scripts/gpu/check_trace.py graph $O/t-graph $O/graph-result.json
  echo "== overhead (bench/torch_overhead.py, one JSON line each)"
  python3 bench/torch_overhead.py --calls 3000 --repeats 21 --label baseline 2>/dev/null | tail -1
  for s in none native python; do
    $PRE LOCKSTEP_STACKS=$s LOCKSTEP_DIR=$O/t-ov-$s timeout 200 \
      python3 bench/torch_overhead.py --calls 3000 --repeats 21 --label lockstep-$s 2>/dev/null | tail -1
    rm -rf $O/t-ov-$s
  done )

if [ "${NGPUS:-1}" -ge 2 ]; then
  echo "== the seed on 2 GPUs: correct order, then --broken (hang line expected after 15 s)"
  $PRE LOCKSTEP_DIR=$O/t-ok timeout 240 python3 -m torch.distributed.run --nproc_per_node 2 \
    --master_port 29512 examples/torch/fsdp_ulysses.py --steps 2 >$O/ok.log 2>&1
  echo "rc=$?"
  $PRE LOCKSTEP_DIR=$O/t-bad LOCKSTEP_HANG_TIMEOUT=15 timeout -s TERM 75 python3 -m torch.distributed.run \
    --nproc_per_node 2 --master_port 29513 examples/torch/fsdp_ulysses.py --broken --steps 3 >$O/bad.log 2>&1
  echo "rc=$? (124: stopped by the timeout, as expected)"
  grep "lockstep:" $O/bad.log
  sleep 2
  python3 - "$O" <<'PY'
import glob, sqlite3, sys
for d in ("t-ok", "t-bad"):
    print("--", d)
    for f in sorted(glob.glob(f"{sys.argv[1]}/{d}/*.lockstep.sqlite")):
        db = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        m = dict(db.execute("select key, value from meta"))
        if not db.execute("select count(*) from ops").fetchone()[0]:
            continue
        done = db.execute("select max(o.seq) from ops o join completions using(call_index) "
                          "where o.comm_id=1").fetchone()[0]
        stuck = db.execute("select o.seq, o.op, o.count, o.stack_id from ops o left join completions c "
                           "using(call_index) where c.call_index is null and o.seq is not null "
                           "order by o.call_index limit 1").fetchall()
        print(f"rank {m['global_rank']} exit={m.get('exit_reason')} comm={db.execute('select comm_hash from comms where id=1').fetchone()[0]} "
              f"last completed seq {done}; first in flight: {[s[:3] for s in stuck]}")
        for seq, op, count, st in stuck:
            for fn, file, line in db.execute("select function, file, line from frames where stack_id=? "
                                             "and kind='python' order by depth limit 6", (st,)):
                print(f"    {fn}  {file.split('/')[-1]}:{line}")
PY
fi
