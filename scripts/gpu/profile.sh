#!/usr/bin/env bash
# Where the recorder's hot path spends its time on a GPU machine, part by part. One
# process per configuration (LOCKSTEP_BENCH_OFF set at start), processes alternating within each
# round; each prints nccl_call_overhead --mode=profile's "profile-plain" line (profile counters
# over every timed batch, ns per call per part) and its plain line. Writes $OUT/profile.jsonl,
# $OUT/profile.log.
#   COST_DIR=build-cost ROUNDS=4 OFFS=",donerows,prefetch,eager" bash scripts/gpu/profile.sh
set -u
cd "$(dirname "$0")/../.."
D=$(cd "${COST_DIR:-build-cost}" && pwd)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
NCCL_LIB=$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$D/lib:$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 LOCKSTEP_HANG_TIMEOUT=60
T=$(mktemp -d /tmp/cost6p.XXXXXX)
P=$OUT/profile.jsonl; : >"$P"
IFS=',' read -r -a offs <<<"${OFFS:-,donerows,prefetch,eager}"
for round in $(seq 1 "${ROUNDS:-4}"); do
  for comp in ${COMPS:-covering}; do
    for off in "${offs[@]}"; do
      rm -rf "$T/tr"
      LOCKSTEP_BENCH_OFF=$off LOCKSTEP_COMPLETION=$comp LOCKSTEP_DIR=$T/tr LOCKSTEP_STACKS=${STACKS:-none} \
        LD_PRELOAD=$D/lib-cov/liblockstep.so timeout -s KILL 60 "$D/bin/nccl_call_overhead" --mode=profile \
        --rounds=15 2>>"$OUT/profile.log" | sed -E "s/^\{/{\"round\": $round, \"completion\": \"$comp\", /" >>"$P"
    done
  done
done
cat "$P"
rm -rf "$T"
