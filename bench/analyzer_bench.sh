#!/usr/bin/env bash
# Times `lockstep analyze` (wall, peak RSS) on synthetic trace directories from bench/gen_trace,
# growing ranks at a fixed op count and ops at a fixed rank count. Figures: docs/analyzer.md.
#   bench/analyzer_bench.sh [BUILD_DIR=build] [WORK_DIR=/tmp/lockstep-bench]
# Trace directories are kept in WORK_DIR (several GB) so reruns skip generation.
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/lockstep-bench}
mkdir -p "$WORK"
printf "%-6s %-8s %-10s %-8s %-8s %-8s %-9s %s\n" ranks ops trace_MB wall_s cpu_s rss_MB load_ms analyse_ms
for size in 64x25000 64x50000 64x100000 128x100000 256x100000; do
  ranks=${size%x*} ops=${size#*x}
  dir="$WORK/$size"
  [ -d "$dir" ] || "$BUILD/bin/gen_trace" "$dir" --ranks "$ranks" --ops "$ops" --threads 2 >/dev/null
  sync
  mb=$(du -sm "$dir" | cut -f1)
  /usr/bin/time -f "%e %M %U %S" -o "$WORK/time.txt" "$BUILD/bin/lockstep" analyze "$dir" --timing >/dev/null 2>"$WORK/timing.txt" || true
  # GNU time prefixes "Command exited with non-zero status 1" (analyze exits 1: it found the divergence).
  read -r wall rss user sys < <(tail -n 1 "$WORK/time.txt")
  cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
  load=$(sed -n 's/.*load \([0-9]*\) ms.*/\1/p' "$WORK/timing.txt")
  ana=$(sed -n 's/.*analyse \([0-9]*\) ms.*/\1/p' "$WORK/timing.txt")
  printf "%-6s %-8s %-10s %-8s %-8s %-8s %-9s %s\n" "$ranks" "$ops" "$mb" "$wall" "$cpu" "$((rss / 1024))" "$load" "$ana"
done
