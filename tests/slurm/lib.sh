# Sourced by the Slurm tests (tests/slurm/*.sh). ctest passes BUILD (the build dir) and SRC.
# Starts the project's single-node Slurm (scripts/slurm/start.sh; a no-op when it is up) and sets
# PATH/LD_LIBRARY_PATH to the build's lockstep and CPU NCCL fixture. Exits 77 (ctest skip) only
# when Slurm cannot be started here at all (not root, no apt) and says why; under CI=true that
# is a failure instead.
set -euo pipefail
: "${BUILD:?}" "${SRC:?}"
export PATH="$BUILD/bin:$PATH"
export LD_LIBRARY_PATH="$BUILD/fixture-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LOCKSTEP_SLURM_DIR=${LOCKSTEP_SLURM_DIR:-$BUILD/slurm-state}
export SLURM_CONF="$LOCKSTEP_SLURM_DIR/slurm.conf"

fail() { echo "FAIL: $*" >&2; exit 1; }
slurm_up() {
  local rc=0
  bash "$SRC/scripts/slurm/start.sh" >/dev/null || rc=$?
  if [ "$rc" -eq 3 ]; then
    if [ "${CI:-}" = true ]; then fail "Slurm cannot start here (see above), and CI must run the Slurm tests"; fi
    echo "SKIP: Slurm cannot start on this machine (see above)" >&2
    exit 77
  fi
  [ "$rc" -eq 0 ] || fail "scripts/slurm/start.sh failed ($rc); logs in $LOCKSTEP_SLURM_DIR/log"
}
# A fresh directory for this test's traces and outputs.
T="$BUILD/slurm-tests/$(basename "$0" .sh)"
rm -rf "$T"
mkdir -p "$T"
# Wait until shell code succeeds (evaluated anew every 0.2 s): wait_for SECONDS WHAT 'CODE'
wait_for() {
  local s=$1 what=$2 code=$3
  local end=$((SECONDS + s))
  until eval "$code" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || fail "timed out after ${s}s waiting for: $what"
    sleep 0.2
  done
}
# The job id of the job named $1 (squeue), empty if none.
job_id() { squeue -h -n "$1" -o %i | head -n1; }
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
# The recorder may be committing (a USR1 flush, its exit) while a test reads: wait for its lock
# as lockstep's own reader does, rather than fail with "database is locked".
meta() { sqlite3 -readonly -cmd ".timeout 10000" "$1" "SELECT value FROM meta WHERE key='$2'"; }
count_ops() { sqlite3 -readonly -cmd ".timeout 10000" "$1" "SELECT count(*) FROM ops WHERE seq IS NOT NULL"; }
