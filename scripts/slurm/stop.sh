#!/usr/bin/env bash
# Stops what scripts/slurm/start.sh started (slurmd, slurmctld, munged), by their pid files;
# waits until each has exited. Leaves the state directory (logs) in place.
set -uo pipefail
D=${LOCKSTEP_SLURM_DIR:-/tmp/lockstep-slurm}
M=${LOCKSTEP_MUNGE_DIR:-/run/lockstep-munge-$(printf %s "$D" | md5sum | cut -c1-12)}  # as start.sh
stop() {  # name pidfile
  [ -s "$2" ] || return 0
  local pid; pid=$(cat "$2")
  kill -0 "$pid" 2>/dev/null || { rm -f "$2"; return 0; }
  kill -TERM "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "slurm/stop: $1 (pid $pid) still running after 10 s; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$2"
}
if [ -s "$D/slurm.conf" ] && [ -s "$D/slurmctld.pid" ]; then
  SLURM_CONF="$D/slurm.conf" scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
fi
stop slurmd "$D/slurmd.pid"
stop slurmctld "$D/slurmctld.pid"
stop munged "$M/munged.pid"
echo "slurm/stop: stopped (state and logs remain in $D)" >&2
