#!/usr/bin/env bash
# How long `lockstep attach` stops a process like a hung PyTorch rank, and where the stop goes:
# bench/attach_stop_program.py (THREADS threads: futex waits, CPU loops, sleeps, one native wait
# under Python), attached RUNS times; prints each stop's breakdown, then the median and the max of
# the stop and of lockstep's CPU time in it (the wall time grows with the machine's load).
#   bash bench/attach_stop.sh [LOCKSTEP] [THREADS] [RUNS]     (defaults: build/bin/lockstep 24 20)
set -euo pipefail
cd "$(dirname "$0")/.."
L=${1:-build/bin/lockstep}; N=${2:-24}; RUNS=${3:-20}
PY=${PYTHON:-python3}
log=$(mktemp); out=$(mktemp -d)
trap 'kill $job 2>/dev/null; rm -rf "$log" "$out"' EXIT
$PY bench/attach_stop_program.py "$N" >"$log" &
job=$!
for _ in $(seq 1 100); do grep -q '^ready' "$log" && break; sleep 0.1; done
grep -q '^ready' "$log" || { echo "the program did not start"; exit 1; }
echo "program pid $job, $(ls /proc/$job/task | wc -l) threads, $($PY -V 2>&1); load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$RUNS"); do
  "$L" attach "$job" --ras-timeout 1 -o "$out" 2>&1 >/dev/null | grep -E '^lockstep attach: pid .* stopped' || true
done | tee "$out/stops.txt"
# The figure after "stopped", and the one before "ms of CPU".
sed -n 's/.* stopped \([0-9.]*\) ms .*/\1/p' "$out/stops.txt" | sort -n >"$out/wall"
sed -n 's/.*; \([0-9.]*\) ms of CPU.*/\1/p' "$out/stops.txt" | sort -n >"$out/cpu"
for f in wall cpu; do
  awk -v what="$([ $f = wall ] && echo stopped_ms || echo "lockstep's CPU ms in the stop")" '{a[NR] = $1}
    END {if (NR) printf "%s over %d runs: median %.2f, min %.2f, max %.2f\n", what, NR, a[int((NR + 1) / 2)], a[1], a[NR]}' "$out/$f"
done
