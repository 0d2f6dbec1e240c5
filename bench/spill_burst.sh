#!/usr/bin/env bash
# The recorder's spill on a good job at a high op rate (docs/recorder.md "Hot path and writer"):
# the seed's fixed step in a loop, 2 ranks on the CPU NCCL fixture, native stacks, a record queue
# shrunk to QUEUE records so that bursts overflow it; the spill off (LOCKSTEP_SPILL_MB=0) and on
# (its default) in alternation. Prints per run: dropped/spilled/peak spill bytes/sequenced ops per
# rank and `lockstep analyze`'s exit code (0 clean, 4 incomplete; never 1: the job is good).
#   bench/spill_burst.sh BUILD_DIR [ROUNDS] [STEPS] [QUEUE]
set -euo pipefail
B=$(cd "${1:?usage: bench/spill_burst.sh BUILD_DIR [ROUNDS] [STEPS] [QUEUE]}" && pwd)
rounds=${2:-3} steps=${3:-500} queue=${4:-1024}
export LD_LIBRARY_PATH="$B/fixture-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="$B/bin:$PATH"
work=$(mktemp -d /tmp/lockstep-spill.XXXXXX)
trap 'rm -rf "$work"' EXIT
meta='coalesce((select value from meta where key=K),D)'
q="select $(sed "s/K/'dropped_records'/;s/D/'?'/" <<<"$meta") || '/' || $(sed "s/K/'spilled_records'/;s/D/'0'/" <<<"$meta")
   || '/' || $(sed "s/K/'peak_spill_bytes'/;s/D/'0'/" <<<"$meta") || '/' || (select count(*) from ops where seq is not null)"
for ((round = 1; round <= rounds; round++)); do
  for spill in 0 default; do
    d="$work/r$round-$spill"
    env=(LOCKSTEP_QUEUE_RECORDS="$queue")
    [ "$spill" = default ] || env+=(LOCKSTEP_SPILL_MB=0)
    env "${env[@]}" lockstep run -o "$d" --stacks native -- \
      lockstep-launch -n 2 --quiet -- seed_deadlock --fixed --steps "$steps" >/dev/null 2>&1
    rc=0; lockstep analyze "$d" >/dev/null 2>&1 || rc=$?
    stats=$(for f in "$d"/*.lockstep.sqlite; do sqlite3 -readonly "$f" "$q"; done | tr '\n' ' ')
    echo "round $round spill $spill: dropped/spilled/peak bytes/ops per rank: $stats analyze exit $rc (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
