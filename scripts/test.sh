#!/usr/bin/env bash
# The README's second command: set up, build, and run the test suite (what CI runs).
#   scripts/test.sh          every test but those labelled long (docs/testing.md)
#   scripts/test.sh --long   only the long ones: the libFuzzer run and the largest sizes
#   scripts/test.sh --all    both
set -euo pipefail
cd "$(dirname "$0")/.."
select=(-LE long)
case "${1:-}" in
  --long) select=(-L long) ;;
  --all) select=() ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--long|--all]" >&2; exit 2 ;;
esac
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
cd "$BUILD_DIR"
# Four at a time on 2 cores: many tests wait on purpose (hang timeouts, a launcher's stop, Slurm),
# and two slots would leave the cores idle meanwhile; tests that need both cores say so
# (PROCESSORS 2). LOCKSTEP_CTEST_JOBS overrides.
ctest --output-on-failure -j"${LOCKSTEP_CTEST_JOBS:-4}" --timeout 300 "${select[@]}"
