#!/usr/bin/env bash
# Capture every read-only command's output (stdout, stderr, exit code, files written) over trace
# directories, so that two builds can be compared byte for byte:
#   scripts/capture_outputs.sh OLD/lockstep before DIR...
#   scripts/capture_outputs.sh build/bin/lockstep after DIR...
#   diff -r before after
# Files a command writes go through one fixed scratch path, so that paths printed in them agree;
# the shrink's wall time is masked.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 LOCKSTEP OUT DIR..." >&2; exit 2; }
L=$(realpath "$1"); OUT=$2; shift 2
mkdir -p "$OUT"
SCRATCH=${TMPDIR:-/tmp}/lockstep-capture-scratch
rm -rf "$SCRATCH"; mkdir -p "$SCRATCH"
trap 'rm -rf "$SCRATCH"' EXIT

cap() {  # cap NAME ARGS...: stdout, stderr and the exit code of `lockstep ARGS...`
  local name=$1; shift
  "$L" "$@" >"$O/$name.out" 2>"$O/$name.err"
  echo $? >"$O/$name.rc"
}

for d in "$@"; do
  O=$OUT/$(basename "$d"); mkdir -p "$O"
  cap analyze analyze "$d"
  cap analyze-json analyze --json "$d"
  cap check check "$d" --junit "$SCRATCH/junit.xml"
  [ -f "$SCRATCH/junit.xml" ] && mv "$SCRATCH/junit.xml" "$O/check-junit.xml"
  cap report report "$d" -o -
  cap replay-model replay --model "$d"
  cap replay-model-json replay --model --json "$d"
  cap shrink shrink "$d" -o "$SCRATCH/shrink" --no-replay -q
  [ -d "$SCRATCH/shrink" ] && mv "$SCRATCH/shrink" "$O/shrink-out"
  # the shrink's wall time is the one figure that differs between runs
  sed -i -E 's/[0-9]+ ms\)/N ms)/' "$O/shrink.out" "$O"/shrink-out/README.md 2>/dev/null
  cap timeline-text timeline --text "$d"
  cap timeline-json timeline "$d" -o -
  # every communicator (hash prefix and role) at its first and last seq; ops of every rank
  "$L" analyze --json "$d" 2>/dev/null | python3 -c '
import json, sys
try: a = json.load(sys.stdin)
except Exception: sys.exit(0)
ranks = set()
for c in a.get("comms", []):
    for m in c.get("members", []): ranks.add(m["rank"])
    print("stacks", c["hash"], 1)
    print("stacks", c["hash"], max(1, c.get("collectives", 1)))
    if c.get("role"): print("stacks", c["role"], 1)
for r in sorted(ranks): print("ops", r, 0)
' | while read -r what key n; do
    if [ "$what" = stacks ]; then
      cap "stacks-${key//[^A-Za-z0-9_.=-]/_}-$n" stacks "$d" --comm "$key" --seq "$n"
    else
      cap "ops-$key" ops "$d" --rank "$key"
      cap "ops-$key-around" ops "$d" --rank "$key" --around 2 --window 3
    fi
  done
done
