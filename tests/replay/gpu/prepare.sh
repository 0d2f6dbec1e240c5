#!/usr/bin/env bash
# Prepares .carry/gpu for the GPU check of the replay worker (not part of ctest: CI has no GPU).
# Needs a build with the fixture (for the seed traces): BUILD_DIR (default build-replay).
# Then, on a machine with NVIDIA GPUs and torch's NCCL wheel: bash tests/replay/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=${BUILD_DIR:-build-replay}
G=.carry/gpu
rm -rf $G && mkdir -p $G/include
cp /usr/include/sqlite3.h /usr/include/sqlite3ext.h $G/include/       # the GPU box lacks the header
cp -r /usr/local/cuda/include $G/cuda-include                         # nccl.h, cuda.h and friends
g++ -std=c++20 -Ianalyzer -Ischema -Itests/replay tests/replay/gpu/gen_schedules.cpp schema/trace_file.cpp \
    schema/trace_file_model.cpp -lsqlite3 -o /tmp/lockstep-gen-schedules
/tmp/lockstep-gen-schedules $G
# The seed traces, recorded on the CPU fixture: broken order (hangs at 3750) and fixed order.
export LD_LIBRARY_PATH=$PWD/$B/fixture-lib
for mode in bad good; do
  flag=""; [ $mode = good ] && flag=--fixed
  $B/bin/lockstep run -o $G/seed-$mode -- $B/bin/lockstep-launch -n 2 --timeout 5 --quiet -- \
      $B/bin/seed_deadlock --elems 16 $flag || true
done
cp tests/replay/gpu/run.sh $G/run.sh
du -sh $G
