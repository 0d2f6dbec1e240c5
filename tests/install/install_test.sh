#!/usr/bin/env bash
# install_test.sh BUILD_DIR SEED_DEADLOCK FIXTURE_LIB_DIR
# Installs the build into a temporary prefix, moves the prefix (nothing may point back into the
# build tree or the first prefix), checks the layout, and from there: `lockstep --preload-path`
# names the installed recorder, `lockstep run` preloads it, and the seed schedule recorded under
# it hangs and `lockstep analyze` names seq 3750 (exit 1). Then the same for the Debian package
# (cpack -G DEB, unpacked with dpkg-deb -x), whose declared dependencies are checked too; that
# half is skipped with a line where cpack or dpkg-deb is missing.
set -euo pipefail
build=$1 seed=$2 fixture=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset LOCKSTEP_PRELOAD LD_PRELOAD

cmake --install "$build" --prefix "$work/first" >"$work/install.log" || { cat "$work/install.log" >&2; fail "cmake --install"; }
mv "$work/first" "$work/moved"

# check_prefix DIR NAME: the layout, --preload-path, what `lockstep run` preloads, and the seed.
check_prefix() {
  local p=$1 name=$2
  for f in bin/lockstep bin/lockstep-launch bin/lockstep-replay-worker lib/lockstep/liblockstep.so \
           share/doc/lockstep/README.md share/doc/lockstep/docs/README.md share/lockstep/examples/lockstep.sbatch; do
    [ -e "$p/$f" ] || fail "$name: $f is not installed"
  done
  local got
  got=$("$p/bin/lockstep" --preload-path)
  [ "$got" = "$(realpath "$p/lib/lockstep/liblockstep.so")" ] || fail "$name: --preload-path says '$got'"
  got=$("$p/bin/lockstep" run -o "$work/$name-env" -- sh -c 'echo "$LD_PRELOAD"')
  [ "${got%%:*}" = "$(realpath "$p/lib/lockstep/liblockstep.so")" ] || fail "$name: lockstep run preloads '$got'"

  local trace=$work/$name-trace rc=0
  LD_LIBRARY_PATH=$fixture PATH="$p/bin:$PATH" \
    lockstep run -o "$trace" --hang-timeout 2 -- lockstep-launch -n 2 --timeout 8 -- "$seed" \
    >"$work/$name-run.log" 2>&1 || rc=$?
  [ "$rc" -eq 124 ] || { cat "$work/$name-run.log" >&2; fail "$name: the seed should hang and be stopped (124), got $rc"; }
  grep -q "no NCCL progress for" "$work/$name-run.log" || { cat "$work/$name-run.log" >&2; fail "$name: no hang line from the installed recorder"; }
  rc=0
  "$p/bin/lockstep" analyze "$trace" >"$work/$name-analyze.txt" || rc=$?
  cat "$work/$name-analyze.txt"
  [ "$rc" -eq 1 ] || fail "$name: analyze exited $rc, expected 1"
  grep -q "seq 3750: op type differs: reduce_scatter vs all_to_all" "$work/$name-analyze.txt" ||
    fail "$name: analyze does not name seq 3750"
  echo "PASS ($name): installed lockstep recorded and diagnosed the seed"
}
check_prefix "$work/moved" prefix

if ! command -v cpack >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "install: cpack or dpkg-deb missing, Debian package not checked"
  exit 0
fi
(cd "$work" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/pkg") >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
deb=$(ls "$work"/pkg/*.deb)
echo "package: $(basename "$deb"), $(stat -c %s "$deb") bytes"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for d in libsqlite3-0 libunwind8 libstdc++6; do
  grep -q "$d" <<<"$depends" || fail "the package does not declare $d"
done
dpkg-deb -x "$deb" "$work/deb"
check_prefix "$work/deb/usr" deb
