#!/usr/bin/env bash
# Times `lockstep analyze` (wall, CPU, peak RSS; load and analysis separately from --timing) on
# synthetic trace directories from bench/gen_trace. Figures: docs/analyzer.md "Performance" and
# docs/scaling.md. READ=full times `analyze --full-read`; READ=nodes first writes the node
# summaries as a cluster does, one `lockstep summarize DIR --host NODE` per host (gen_trace puts
# 8 ranks on a host, RANKS_PER_HOST; all of them run here one after another and are timed
# together on their own row: on a cluster each node runs its own, about cpu_s / nodes each), then
# times `analyze` reading them; default: the summary-first read of every file (--summary-first:
# the command's own default reads directories of 1 GiB or less whole). SUMMARIZE=every-host
# (with READ=nodes) writes them with one `lockstep summarize DIR --every-host` instead (a copied
# directory; 131,072 ranks are 16,384 hosts, too many processes one after another).
#   bench/analyzer_bench.sh [BUILD_DIR=build] [WORK_DIR=/tmp/lockstep-bench] [SIZES...]
# SIZES are RANKSxOPS[:lag] (":lag": the last host issues 16 ops fewer, a never_issued finding
# on the world communicator; otherwise gen_trace's divergence near the end). Default: the
# growth series and the large-job series (4,096 and 16,384 ranks, ~41 M and ~164 M ops: tens of
# GB of traces). CORES (default 0,1) pins the analyzer with taskset, as on a 2-core machine.
# Trace directories are kept in WORK_DIR so reruns skip generation (node summaries are removed
# after each row). THREADS (default 0: one per hardware thread) is analyze's --threads. Each row
# gives the 1-minute load average before it (figures from a shared machine are upper bounds).
# CMD (default analyze) times another command on the same directories instead: check, report
# (the page written to WORK_DIR/page.html) or replay (`replay --model`, which reads every row of
# every file whatever READ says); the json column is then that command's output.
# Times and peak RSS: /usr/bin/time -v.
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/lockstep-bench}
shift $(( $# > 2 ? 2 : $# ))
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(64x25000 64x50000 64x100000 128x100000 256x100000
                                 2048x2500:lag 4096x10000 4096x10000:lag 16384x2500:lag 16384x10000 16384x10000:lag)
CORES=${CORES:-0,1}
READ=${READ:-summary}
SUMMARIZE=${SUMMARIZE:-host}
THREADS=${THREADS:-0}
CMD=${CMD:-analyze}
case "$CMD" in analyze|check|report|replay) ;; *) echo "analyzer_bench: CMD must be analyze, check, report or replay" >&2; exit 2 ;; esac
RPH=${RANKS_PER_HOST:-8}
times() {  # wall, cpu (user + sys) and rss (KB) of the last /usr/bin/time -v
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s }' "$WORK/time.txt")
  rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$WORK/time.txt")
  local user sys
  user=$(awk -F': ' '/User time/ { print $2 }' "$WORK/time.txt")
  sys=$(awk -F': ' '/System time/ { print $2 }' "$WORK/time.txt")
  cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
}
read_flag=(--summary-first)
[ "$READ" = full ] && read_flag=(--full-read)
mkdir -p "$WORK"
echo "read: $READ; command: $CMD; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %-8s %-4s %-9s %-7s %-7s %-7s %-8s %-10s %s\n" ranks ops lag trace_MB wall_s cpu_s rss_MB load_ms analyse_ms loadavg
for spec in "${SIZES[@]}"; do
  size=${spec%:*} lag=0
  [ "$spec" != "$size" ] && lag=16
  ranks=${size%x*} ops=${size#*x}
  dir="$WORK/$size-lag$lag-rph$RPH"
  if [ ! -d "$dir" ]; then
    if [ "$lag" -gt 0 ]; then
      "$BUILD/bin/gen_trace" "$dir" --ranks "$ranks" --ops "$ops" --diverge-from-end 0 --lag-host-ops "$lag" \
        --ranks-per-host "$RPH" --threads "$(nproc)" >/dev/null
    else
      "$BUILD/bin/gen_trace" "$dir" --ranks "$ranks" --ops "$ops" --ranks-per-host "$RPH" --threads "$(nproc)" >/dev/null
    fi
  fi
  sync
  rm -f "$dir"/*.lockstep-summary
  mb=$(du -sm "$dir" | cut -f1)
  if [ "$READ" = nodes ]; then
    loadavg=$(cut -d' ' -f1 /proc/loadavg)
    # One summarize per host, as each node runs it; the hosts are the files' <host>-<pid> stems.
    find "$dir" -maxdepth 1 -name '*.lockstep.sqlite' -printf '%f\n' | sed 's/-[0-9]*\.lockstep\.sqlite$//' | sort -u >"$WORK/hosts.txt"
    if [ "$SUMMARIZE" = every-host ]; then
      taskset -c "$CORES" /usr/bin/time -v -o "$WORK/time.txt" "$BUILD/bin/lockstep" summarize "$dir" --every-host \
        --threads "$THREADS" >"$WORK/summarize.txt"
    else
      taskset -c "$CORES" /usr/bin/time -v -o "$WORK/time.txt" bash -c \
        'while read -r h; do "$1" summarize "$2" --host "$h" --threads "$3" || exit; done <"$4"' _ \
        "$BUILD/bin/lockstep" "$dir" "$THREADS" "$WORK/hosts.txt" >"$WORK/summarize.txt"
    fi
    times
    nodes=$(ls "$dir" | grep -c '\.lockstep-summary$')
    printf "%-6s %-8s %-4s %-9s %-7s %-7s %-7s %-8s %-10s %s   (summarize --%s: %s summaries, %s MB; %s ms CPU a node)\n" \
      "$ranks" "$ops" "$lag" "$mb" "$wall" "$cpu" "$((rss / 1024))" - - "$loadavg" "$SUMMARIZE" "$nodes" \
      "$(du -cm "$dir"/*.lockstep-summary | tail -n 1 | cut -f1)" "$(awk -v c="$cpu" -v n="$nodes" 'BEGIN { printf "%.0f", c * 1000 / n }')"
  fi
  rc=0
  loadavg=$(cut -d' ' -f1 /proc/loadavg)
  case "$CMD" in
    analyze) cmd=(analyze "$dir" "${read_flag[@]}" --timing --threads "$THREADS" --json) ;;
    check) cmd=(check "$dir" "${read_flag[@]}" --threads "$THREADS") ;;
    report) cmd=(report "$dir" "${read_flag[@]}" --timing --threads "$THREADS" -o "$WORK/page.html") ;;
    replay) cmd=(replay --model --timing --json "$dir") ;;
  esac
  taskset -c "$CORES" /usr/bin/time -v -o "$WORK/time.txt" "$BUILD/bin/lockstep" "${cmd[@]}" \
    >"$WORK/out.json" 2>"$WORK/timing.txt" || rc=$?
  rm -f "$dir"/*.lockstep-summary
  # analyze exits 1 (a finding) on these directories.
  times
  load=$(sed -n 's/.*load \([0-9]*\) ms.*/\1/p' "$WORK/timing.txt")
  ana=$(sed -n 's/.*analyse \([0-9]*\) ms.*/\1/p' "$WORK/timing.txt")
  printf "%-6s %-8s %-4s %-9s %-7s %-7s %-7s %-8s %-10s %s   (exit %s, json %s KB, %s ops not read%s)\n" "$ranks" "$ops" "$lag" "$mb" "$wall" "$cpu" \
    "$((rss / 1024))" "$load" "$ana" "$loadavg" "$rc" "$(( $(stat -c %s "$WORK/out.json" 2>/dev/null || echo 0) / 1024 ))" \
    "$(sed -n 's/.*"ops_not_read": \([0-9]*\).*/\1/p' "$WORK/out.json" | head -n 1)" \
    "$(python3 -c 'import json, sys; u = json.load(open(sys.argv[1]))["reading"]["summaries"]; print(", %d files from %d node summaries" % (u["files"], u["used"]) if u["used"] else "")' "$WORK/out.json" 2>/dev/null)"
done
