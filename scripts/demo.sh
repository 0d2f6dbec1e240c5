#!/usr/bin/env bash
# The README's first command (first version): set up, build, and reproduce the seed deadlock on
# the CPU NCCL fixture. Two ranks run 3,749 matching FSDP + Ulysses collectives, then at op 3750
# rank 0 issues reduce_scatter and rank 1 all_to_all: both hang until lockstep-launch's timeout
# kills them. (The integrator wraps this in `lockstep run` + `lockstep analyze`.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
export LD_LIBRARY_PATH="$PWD/$BUILD_DIR/fixture-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== the fixed order completes:"
"$BUILD_DIR/bin/lockstep-launch" -n 2 --timeout 30 -- "$BUILD_DIR/bin/seed_deadlock" --fixed
echo "== the seed order hangs at op 3750 (stopped by the launcher after ${DEMO_TIMEOUT:-10} s):"
status=0
"$BUILD_DIR/bin/lockstep-launch" -n 2 --timeout "${DEMO_TIMEOUT:-10}" -- "$BUILD_DIR/bin/seed_deadlock" || status=$?
if [ "$status" -ne 124 ]; then
  echo "demo: expected the seed run to hang and time out (status 124), got status $status" >&2
  exit 1
fi
echo "== reproduced: both ranks hung at op 3750 (see above)"
