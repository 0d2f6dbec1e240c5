#!/usr/bin/env bash
# Configures and builds lockstep into ${BUILD_DIR:-build}.
#   scripts/build.sh [CMAKE_ARGS...]          everything, tests and benchmarks included (test.sh)
#   scripts/build.sh --demo [CMAKE_ARGS...]   only what the demo runs: the tool, the CPU NCCL
#                                             fixture and the seed example; no test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ "${1:-}" = --demo ]; then
  shift
  bash scripts/setup.sh
  options=(-DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_BENCH=OFF)
  targets=(--target lockstep_cli lockstep lockstep-launch lockstep-replay-worker seed_deadlock lockstep_fixture_libs)
else
  bash scripts/setup.sh --test
  options=(-DLOCKSTEP_BUILD_TESTS=ON -DLOCKSTEP_BUILD_BENCH=ON)
  targets=()
fi
launcher=()
# ccache when present (developer machines); CI's fresh machine builds without it.
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${options[@]}" "${launcher[@]}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
