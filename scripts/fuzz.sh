#!/usr/bin/env bash
# Builds the trace fuzz target with clang + libFuzzer + ASan/UBSan in build-fuzz/ (the main gcc
# build is untouched) and runs it for SECONDS (default 300) on the committed seed corpus
# (tests/fuzz/corpus) plus what earlier runs found (build-fuzz/corpus). Findings (crash-*,
# timeout-*, oom-*) land in build-fuzz/findings/; reproduce one with
#   build-fuzz/bin/trace_fuzzer build-fuzz/findings/crash-...   (LOCKSTEP_FUZZ_VERBOSE=1 prints each command)
# and, once fixed, copy it to tests/fuzz/regressions/ (replayed in every ctest run).
# --ci: exit 77 (ctest: skipped) when clang or libFuzzer is missing; a fixed seed and a fixed
# number of executions (FUZZ_SEED, default 1; FUZZ_RUNS, default 200; SECONDS stays the upper
# bound), so one tree gives one result: a clean-clone CI run predicts the official one, and a
# finding reproduces. Varied, longer runs are for developers (no --ci; docs/testing.md).
# --build-only: build the target and stop (ctest builds it in one test, using both cores, and
# runs it in another, on one core, beside other tests).
# Extra arguments after the seconds go to libFuzzer (e.g. -jobs=4 -workers=4).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
shift || true
ci=0
build_only=0
if [ "${1:-}" = "--ci" ]; then ci=1; shift; fi
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift; fi
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}

cxx=$(command -v clang++ || command -v clang++-14 || true)
cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cxx" ] || [ -z "$cc" ] || ! ls "$("$cxx" -print-resource-dir)"/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ with libFuzzer is needed (Debian: clang libclang-rt-14-dev; scripts/setup.sh --test)" >&2
  [ "$ci" = 1 ] && exit 77
  exit 2
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# -O1 and line tables only: what ASan reports need, and a shorter build than -O2 -g.
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -gline-tables-only"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  # A unity build: the sanitized compile is CI's longest step, and most of it is the same headers
  # parsed again (378 vs 539 CPU-s for trace_fuzzer on the dev box).
  CC="$cc" CXX="$cxx" cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=None -DLOCKSTEP_FUZZ=ON -DCMAKE_UNITY_BUILD=ON \
    -DLOCKSTEP_BUILD_BENCH=OFF "-DCMAKE_C_FLAGS=$san" "-DCMAKE_CXX_FLAGS=$san" "${launcher[@]}" >/dev/null
fi
cmake --build "$BUILD_DIR" --target trace_fuzzer -j"$(nproc)" >/dev/null
[ "$build_only" = 1 ] && exit 0
[ -x "$BUILD_DIR/bin/trace_fuzzer" ] || { echo "fuzz.sh: $BUILD_DIR/bin/trace_fuzzer was not built" >&2; exit 2; }

mkdir -p "$BUILD_DIR/corpus" "$BUILD_DIR/findings"
log="$BUILD_DIR/fuzz.log"
# Leaks: the CLI's loaders keep nothing between runs, but libFuzzer's leak check per input is
# slow on 250 KB SQLite inputs; ASan still reports leaks at exit.
ci_args=()
[ "$ci" = 1 ] && ci_args=(-seed="${FUZZ_SEED:-1}" -runs="${FUZZ_RUNS:-200}")
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
  "$BUILD_DIR/bin/trace_fuzzer" -max_total_time="$seconds" -timeout=30 -error_exitcode=1 -timeout_exitcode=1 -rss_limit_mb=4096 -max_len=1048576 \
  -artifact_prefix="$BUILD_DIR/findings/" -print_final_stats=1 "${ci_args[@]}" "$@" \
  "$BUILD_DIR/corpus" tests/fuzz/corpus 2>&1 | tee "$log" | grep -E "^#[0-9]+.*(pulse|DONE)|ERROR|finding|stat::|Test unit written" 
rc=${PIPESTATUS[0]}
set -e
echo "fuzz.sh: libFuzzer exit $rc after ${seconds}s; log $log; findings in $BUILD_DIR/findings/" >&2
exit "$rc"
