#!/usr/bin/env bash
# Configures and builds lockstep into ${BUILD_DIR:-build}.
#   scripts/build.sh [CMAKE_ARGS...]          everything, tests and benchmarks included (test.sh)
#   scripts/build.sh --demo [CMAKE_ARGS...]   only what the demo runs: the tool, the CPU NCCL
#                                             fixture and the seed example; no test dependencies,
#                                             -O2 without debug information
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
launcher=()
unity=ON
# ccache when present. A developer's build with ccache compiles one file per object, so an edit
# recompiles one file; CI ($CI set), a machine without ccache and the demo compile each library
# as one unity file (LOCKSTEP_UNITY_BUILD): less than half the CPU time from scratch (docs/testing.md).
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  [ -n "${CI:-}" ] || unity=OFF
fi
if [ "${1:-}" = --demo ]; then
  shift
  bash scripts/setup.sh
  # -O2 without -g: the demo needs no debugger, and native stacks name function+offset either way.
  options=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"
           -DLOCKSTEP_UNITY_BUILD=ON -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_BENCH=OFF)
  targets=(--target lockstep_cli lockstep lockstep-launch lockstep-replay-worker seed_deadlock lockstep_fixture_libs)
else
  bash scripts/setup.sh --test
  options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOCKSTEP_UNITY_BUILD=$unity -DLOCKSTEP_BUILD_TESTS=ON -DLOCKSTEP_BUILD_BENCH=ON)
  # CI: the same -O2 code without -g. Debug information is 30-45 % of a file's compile time here
  # and more of each link; no test reads it (native frames are named from symbols and unwound from
  # .eh_frame). A developer's build keeps it.
  [ -z "${CI:-}" ] || options+=("-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG")
  targets=()
fi
cmake -S . -B "$BUILD_DIR" "${options[@]}" "${launcher[@]}" "$@" >/dev/null
[ -z "${LOCKSTEP_CONFIGURE_ONLY:-}" ] || exit 0  # tests/demo: what the configure found, no build
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
