#!/usr/bin/env bash
# The README's first command: set up, build, reproduce the seed deadlock on the CPU NCCL fixture
# under the recorder, and diagnose it.
#
# Two ranks run 3,749 matching collectives shaped like an FSDP + Ulysses training step, then at
# seq 3750 of the same communicator rank 0 issues reduce_scatter (FSDP post_backward) and rank 1
# all_to_all (Ulysses backward). Both hang, as with NCCL. The recorder's hang timeout fires after
# a few seconds: each rank prints one line, rank 0 prints the diagnosis into the job's log, the
# launcher stops the job, and `lockstep analyze` explains it from the trace files. Then the fixed
# order runs to completion and passes `lockstep check`, `lockstep replay` proves both, and
# `lockstep report` writes the HTML page of the hung run.
#
# It installs only what building and running the tool needs (scripts/setup.sh) and builds only
# what it runs (scripts/build.sh --demo: no tests, benchmarks or fuzzing).
#   scripts/demo.sh               set up, build, run
#   scripts/demo.sh --no-build    run on an existing build (${BUILD_DIR:-build}; ctest demo.script)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = --no-build ] || bash scripts/build.sh --demo
B=${BUILD_DIR:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
export LD_LIBRARY_PATH="$B/fixture-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$B/bin:$PATH"
T=${DEMO_DIR:-$(mktemp -d /tmp/lockstep-demo.XXXXXX)}
rm -rf "$T/broken" "$T/fixed"; mkdir -p "$T"

echo
echo "== 1. the seed schedule under the recorder (hangs at seq 3750; the launcher stops it)"
status=0
lockstep run -o "$T/broken" --hang-timeout "${DEMO_HANG_TIMEOUT:-3}" -- \
  lockstep-launch -n 2 --timeout "${DEMO_TIMEOUT:-8}" -- seed_deadlock || status=$?
if [ "$status" -ne 124 ]; then
  echo "demo: expected the seed run to hang and be stopped by the launcher (status 124), got $status" >&2
  exit 1
fi

echo
echo "== 2. lockstep analyze $T/broken"
status=0
lockstep analyze "$T/broken" || status=$?
[ "$status" -eq 1 ] || { echo "demo: analyze should report the divergence (exit 1), got $status" >&2; exit 1; }

echo
echo "== 3. the fixed order completes and passes the CI gate"
lockstep run -o "$T/fixed" -- lockstep-launch -n 2 --quiet --timeout 60 -- seed_deadlock --fixed
lockstep check "$T/fixed"

echo
echo "== 4. replay: the model checker and a re-run of each recorded schedule"
status=0; lockstep replay --model "$T/broken" || status=$?
[ "$status" -ne 0 ] || { echo "demo: the model checker should reject the broken schedule" >&2; exit 1; }
lockstep replay --model "$T/fixed"
status=0; lockstep replay "$T/broken" --timeout 5 >"$T/replay-broken.log" 2>&1 || status=$?
head -n 2 "$T/replay-broken.log"
[ "$status" -ne 0 ] || { echo "demo: the broken schedule should hang under replay" >&2; exit 1; }
lockstep replay "$T/fixed" --timeout 60

echo
echo "== 5. lockstep report $T/broken -o $T/report.html"
lockstep report "$T/broken" -o "$T/report.html"
[ -s "$T/report.html" ] || { echo "demo: lockstep report wrote no page" >&2; exit 1; }

echo
echo "demo: done. Traces in $T (SQLite files, docs/schema.md)."
echo "demo: the HTML report of the hung run: file://$T/report.html"
