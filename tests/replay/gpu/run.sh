#!/usr/bin/env bash
# Replay on real GPUs (prepared by tests/replay/gpu/prepare.sh; carry .carry/gpu) with real NCCL (from the torch wheel): builds the worker and the launcher,
# runs one-rank schedules, and (with 2 GPUs) the seed traces recorded on the CPU fixture.
set -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))")
echo "NCCL_LIB=$NCCL_LIB"; nvidia-smi -L
g++ -std=c++20 -O2 -Ianalyzer -Ischema -Ireplay -Ilauncher -isystem .carry/gpu/include -isystem .carry/gpu/cuda-include \
  analyzer/trace_loader.cpp analyzer/schedule.cpp replay/rank_schedule.cpp replay/worker.cpp replay/worker_main.cpp \
  -o /tmp/w /usr/lib/x86_64-linux-gnu/libsqlite3.so.0 -ldl -lpthread || exit 1
g++ -std=c++20 -O2 -Ilauncher launcher/launcher.cpp launcher/main.cpp -o /tmp/launch -lpthread || exit 1
export LD_LIBRARY_PATH=$NCCL_LIB NCCL_DEBUG=WARN
mkdir -p /tmp/rdv
run1() {
  rm -rf /tmp/rdv/*; echo "=== 1 rank: $*"; local t0=$(date +%s.%N)
  RANK=0 LOCAL_RANK=0 LOCKSTEP_RENDEZVOUS_DIR=/tmp/rdv timeout 60 /tmp/w "$@"
  echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,2))")"
}
run1 --file .carry/gpu/ok/rank-0.lockstep.sqlite --timeout 5 --verbose
run1 --file .carry/gpu/ok/rank-0.lockstep.sqlite --timeout 5 --delay-seed 3 --max-delay-us 500
run1 --file .carry/gpu/hang/rank-0.lockstep.sqlite --timeout 5
ngpu=$(nvidia-smi -L | wc -l)
if [ "$ngpu" -ge 2 ]; then
  for t in seed-good seed-bad; do
    # --files wants rank order; the recorder names files by pid.
    files=$(python3 -c "import glob,sqlite3,sys;fs=glob.glob('.carry/gpu/$t/*.sqlite');print(' '.join(sorted(fs,key=lambda f:int(sqlite3.connect(f).execute(\"select value from meta where key='global_rank'\").fetchone()[0]))))")
    echo "=== 2 ranks: $t"; t0=$(date +%s.%N)
    /tmp/launch -n 2 --timeout 60 -- /tmp/w --files $files --timeout 5 2>&1 | tail -8
    echo "rc=${PIPESTATUS[0]} wall=$(python3 -c "import time;print(round(time.time()-$t0,2))")"
  done
  echo "=== 2 ranks: seed-good, 3 perturbed trials"
  t=seed-good; files=$(python3 -c "import glob,sqlite3,sys;fs=glob.glob('.carry/gpu/$t/*.sqlite');print(' '.join(sorted(fs,key=lambda f:int(sqlite3.connect(f).execute(\"select value from meta where key='global_rank'\").fetchone()[0]))))")
  for s in 1 2 3; do /tmp/launch -n 2 --timeout 60 --quiet -- /tmp/w --files $files --timeout 5 --delay-seed $s --max-delay-us 200; echo "seed $s rc=$?"; done
fi
