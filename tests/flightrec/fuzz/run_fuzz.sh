#!/usr/bin/env bash
# Bounded libFuzzer run of the FR dump reader, seeded with the real H200 dumps.
#   run_fuzz.sh FUZZ_BIN DATA_DIR SECONDS
# Fails (non-zero) on any crash, leak or sanitizer report.
set -euo pipefail
bin=$1 data=$2 secs=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
for f in "$data"/*/nccl_trace_rank_*; do cp "$f" "$work/corpus/$(basename "$(dirname "$f")")-$(basename "$f")"; done
cd "$work"
"$bin" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 corpus 2>&1 | tail -n 25
