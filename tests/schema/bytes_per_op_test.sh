#!/usr/bin/env bash
# Schema 2's size budget on a generated trace: at most 40 bytes per op at full detail (every
# column, completions, stacks, checkpoints), file size over ops. A size, not a timing.
set -euo pipefail
gen=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ops=100000
"$gen" "$dir" --ranks 4 --ops $ops --diverge-from-end 0 --threads 1 >/dev/null
fail=0
for f in "$dir"/*.lockstep.sqlite; do
  size=$(stat -c %s "$f")
  per_op=$((size / ops))
  echo "$(basename "$f"): $size bytes, $per_op bytes/op"
  if [ "$size" -gt $((40 * ops)) ]; then
    echo "FAIL: more than 40 bytes per op" >&2
    fail=1
  fi
done
exit $fail
