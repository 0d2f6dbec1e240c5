#!/usr/bin/env bash
# A hung job's node summaries, used while it hangs: on a gen_trace directory of live files
# (--live: no exit, content generation 1), `lockstep summarize DIR --every-host`, then a heartbeat
# committed into every file (meta last_flush_mono_ns moved 3 s, as a live recorder does once a
# second), then `lockstep analyze` timed from the summaries (every file refreshed) and, the
# summaries removed, reading every file. Figures: docs/scaling.md.
#   bench/live_summary_bench.sh [BUILD_DIR=build] [WORK_DIR=/tmp/lockstep-bench] [RANKSxOPS=16384x500]
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/lockstep-bench}
SIZE=${3:-16384x500}
CORES=${CORES:-0,1}
ranks=${SIZE%x*} ops=${SIZE#*x}
dir="$WORK/live-$SIZE"
mkdir -p "$WORK"
[ -d "$dir" ] || "$BUILD/bin/gen_trace" "$dir" --ranks "$ranks" --ops "$ops" --live --threads "$(nproc)" >/dev/null
rm -f "$dir"/*.lockstep-summary
"$BUILD/bin/lockstep" summarize "$dir" --every-host >/dev/null
# The heartbeat: one short write transaction a file (Python's sqlite3: no sqlite3 CLI needed).
python3 - "$dir" <<'PY'
import os, sqlite3, sys
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    if not f.endswith(".lockstep.sqlite"):
        continue
    db = sqlite3.connect(os.path.join(d, f))
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 3000000000 WHERE key = 'last_flush_mono_ns'")
    db.commit()
    db.close()
PY
sync
run() {  # LABEL: wall, CPU, peak RSS of `lockstep analyze DIR --json`, and what it read
  taskset -c "$CORES" /usr/bin/time -f "%e %U %S %M" -o "$WORK/time.txt" "$BUILD/bin/lockstep" analyze "$dir" --json \
    >"$WORK/out.json" 2>/dev/null || true
  read -r wall user sys rss < <(tail -n 1 "$WORK/time.txt")  # after "Command exited with ..." (analyze exits 1)
  local read
  read=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["reading"]["summaries"]; print("summaries used %d, files %d, refreshed %d, ignored %d" % (s["used"], s["files"], s["refreshed"], len(s["ignored"])))' "$WORK/out.json")
  printf "%-16s %6s s wall %6.2f CPU-s %5d MiB   %s   (load %s)\n" "$1" "$wall" "$(awk -v u="$user" -v s="$sys" "BEGIN { print u + s }")" $((rss / 1024)) "$read" \
    "$(cut -d' ' -f1 /proc/loadavg)"
}
echo "$SIZE, live files, every one refreshed by a heartbeat after summarizing:"
run "from summaries"
run "from summaries"
mkdir -p "$WORK/live-summaries"
mv "$dir"/*.lockstep-summary "$WORK/live-summaries/"
run "every file"
run "every file"
mv "$WORK/live-summaries/"*.lockstep-summary "$dir/"
