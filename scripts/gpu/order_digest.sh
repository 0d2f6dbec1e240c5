#!/usr/bin/env bash
# Order digests under real PyTorch + NCCL (docs/scaling.md "order digests"): records the FSDP2 +
# Ulysses program long enough for its communicators to pass checkpoints (eager and compiled;
# collectives issued from the main thread and from autograd's), then per trace file how many
# checkpoints carry an order digest (a chain broken by a collective reaching the writer out of
# call order leaves the later ones NULL), whether the full read finds them consistent with the
# rows (no digest_inconsistent), and what a summary-first read proves with them.
#   OUT=/tmp/od bash scripts/gpu/order_digest.sh     (build-gpu/ carried; world size 1)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out/order-digest}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29513}
export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 OPENBLAS_NUM_THREADS=1
[ -d "$ROOT/.carry/lib" ] && export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=${PYTHON:-python3}
LS=${BUILD_DIR:-$ROOT/build-gpu}/bin/lockstep
STEPS=${STEPS:-200}

run() {  # NAME ARGS...: record examples/torch/fsdp_ulysses.py ARGS into $OUT/NAME
  local name=$1; shift
  rm -rf "$OUT/$name"
  /usr/bin/time -f "%e s" "$LS" run -o "$OUT/$name" --stacks python -- $PY examples/torch/fsdp_ulysses.py "$@" \
    >"$OUT/$name.log" 2>&1
  echo "== $name: rc=$? ($(tail -n 1 "$OUT/$name.log"))"
  "$LS" analyze "$OUT/$name" --full-read --json >"$OUT/$name.full.json" 2>/dev/null
  echo "full read: exit $?"
  "$LS" analyze "$OUT/$name" --summary-first --json >"$OUT/$name.sf.json" 2>/dev/null
  echo "summary first: exit $?"
  $PY - "$OUT/$name" "$OUT/$name.full.json" "$OUT/$name.sf.json" <<'PY'
import glob, json, sqlite3, sys
d, full, sf = sys.argv[1:4]
for f in sorted(glob.glob(d + "/*.lockstep.sqlite")):
    db = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
    n, with_order = db.execute("SELECT count(*), count(order_count) FROM checkpoints").fetchone()
    colls = db.execute("SELECT count(*) FROM ops WHERE seq IS NOT NULL AND op NOT IN ('send','recv','send_recv')").fetchone()[0]
    tids = db.execute("SELECT count(DISTINCT tid) FROM signatures").fetchone()[0]
    first_null = db.execute("SELECT min(o.call_index) FROM checkpoints c JOIN ops o ON o.comm_id = c.comm_id AND o.seq = c.seq "
                            "WHERE c.order_count IS NULL").fetchone()[0]
    print(f"{f.split('/')[-1]}: {colls} collectives, issuing threads {tids}, checkpoints {n}, with an order digest {with_order}"
          + (f", the first without at call {first_null}" if first_null is not None else ""))
for name, path in (("full read", full), ("summary first", sf)):
    try:
        j = json.load(open(path))
    except Exception as e:
        print(f"{name}: no report ({e})"); continue
    ev = [e["kind"] for e in j.get("evidence", [])]
    r = j.get("reading", {})
    print(f"{name}: verdict {j.get('verdict')}, evidence {ev}, ops not read {r.get('ops_not_read')}, "
          f"order proven {r.get('order_proven')}, all-to-alls proven {r.get('all_to_all_proven')}")
PY
}

run fsdp-eager --fixed --steps "$STEPS"
run fsdp-compiled --fixed --compile --steps "$STEPS"
