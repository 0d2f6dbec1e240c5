#!/usr/bin/env bash
# A real Flight Recorder dump of torch's batch_isend_irecv at world size 1 (send and receive to
# the rank itself: tests/data/fr-h200/ws1-p2p), and its entries' seq fields, under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 TORCH_FR_BUFFER_SIZE=2000
timeout -s KILL 90 python3 examples/torch/fr_dump.py --out "$OUT/ws1-p2p" --p2p-self >"$OUT/ws1-p2p.log" 2>&1
echo "fr_dump rc=$?"
python3 - "$OUT/ws1-p2p/nccl_trace_rank_0" <<'PY'
import pickle, sys
for e in pickle.load(open(sys.argv[1], "rb"))["entries"]:
    print(e.get("record_id"), e.get("pg_id"), e.get("collective_seq_id"), e.get("p2p_seq_id"), e.get("is_p2p"),
          e.get("profiling_name"), e.get("state"))
PY
