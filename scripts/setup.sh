#!/usr/bin/env bash
# Installs the Debian packages lockstep needs; does nothing (fast) when all are present.
#   scripts/setup.sh          what building and running the tool needs (the demo)
#   scripts/setup.sh --test   that, plus what the test suite needs (scripts/test.sh)
set -euo pipefail
pkgs=(cmake g++ make libsqlite3-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
      libmimalloc-dev         # the CLI's allocator, cli/CMakeLists.txt: reading many files
      libunwind8              # dlopened by the recorder for native stacks
      libunwind-dev)          # libunwind-ptrace: lockstep attach unwinds other processes
if [ "${1:-}" = --test ]; then
  pkgs+=(libgtest-dev libbenchmark-dev python3-dev sqlite3
         dpkg-dev              # tests/install: the Debian package (cpack, dpkg-deb)
         chromium              # the report's browser test (tests/report), ~80 MB download
         clang libclang-rt-14-dev  # clang + libFuzzer: scripts/fuzz.sh (label long, docs/testing.md)
         slurm-wlm munge)      # the Slurm tests (tests/slurm, scripts/slurm/start.sh)
fi
# One dpkg-query for all: a package it does not know prints nothing, so it counts as missing.
installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${pkgs[@]}" 2>/dev/null | awk '$4 == "installed" {print $1}' || true)
missing=()
for p in "${pkgs[@]}"; do
  grep -qx "$p" <<<"$installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -f /usr/local/cuda/include/nccl.h ]; then
  echo "setup: /usr/local/cuda/include/nccl.h is missing (CUDA toolkit with NCCL headers needed)" >&2
  exit 1
fi
