#!/usr/bin/env bash
# fake_host.sh CMD [ARGS...]: runs one Slurm task as if on its own host, for the several-hosts
# test: tasks 2k and 2k+1 share the host name "node-k" (a UTS namespace) and a monotonic clock
# offset by k * LOCKSTEP_TEST_HOST_CLOCK_STEP_S seconds (a time namespace): clocks of different
# hosts disagree, as they do on a real cluster.
set -euo pipefail
host=$((SLURM_PROCID / 2))
offset=$((host * ${LOCKSTEP_TEST_HOST_CLOCK_STEP_S:-86400}))
# The wrappers stand for the host, not the task: scancel --signal=USR1 (sent to every process of
# the step) must reach the task as on a real node, not kill unshare (and the task with it). So
# unshare and sh ignore USR1, and the task gets its default disposition back.
trap '' USR1
exec unshare --uts --time --monotonic "$offset" --fork --kill-child \
  sh -c 'hostname "$0" && exec env --default-signal=USR1 "$@"' "node-$host" "$@"
