#!/usr/bin/env bash
# Runs one of the README's commands on a fresh Debian 12 with nothing installed: a minimal
# debootstrap root (no compiler, no cmake, no ccache), the CUDA toolkit's headers bound read-only
# from the host, the repository's committed tree copied in. What a new user's first command
# costs, installs included (docs/testing.md "A fresh machine"). Root, debootstrap and Debian's
# mirror needed; on demand, not in CI.
#   scripts/fresh-machine.sh DIR [demo|test]     DIR: an empty folder for the root (~1 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:?usage: scripts/fresh-machine.sh DIR [demo|test]}
what=${2:-demo}
case $what in demo) cmd=./scripts/demo.sh ;; test) cmd=./scripts/test.sh ;; *) exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "fresh-machine: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null
[ -e "$root/etc/debian_version" ] || debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
cleanup() { umount -R "$root/dev" "$root/sys" "$root/proc" "$root/usr/local/cuda" 2>/dev/null || true; }
trap cleanup EXIT
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mkdir -p "$root/usr/local/cuda"
mount --bind /usr/local/cuda "$root/usr/local/cuda"
mount -o remount,bind,ro "$root/usr/local/cuda"
cp /etc/resolv.conf "$root/etc/resolv.conf"
rm -rf "$root/root/lockstep"; mkdir -p "$root/root/lockstep"
git archive HEAD | tar -x -C "$root/root/lockstep"
start=$(date +%s.%N)
status=0
chroot "$root" env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c "cd /root/lockstep && $cmd" || status=$?
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v c="$cmd" -v r="$status" \
  'BEGIN { printf "fresh-machine: %s exit %d in %.1f s wall\n", c, r, e - s }'
exit "$status"
