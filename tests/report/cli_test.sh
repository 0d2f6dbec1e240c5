#!/usr/bin/env bash
# `lockstep report` as a user runs it: a page written (0), to stdout with -o -, and the input
# errors (no directory, no -o, unwritable output) answered with 2 and no file.
#   cli_test.sh BUILD_BIN
set -euo pipefail
bin=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-report-cli-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$bin/gen_trace" "$work/trace" --ranks 16 --ops 32 --diverge-from-end 4 --threads 2 >/dev/null

rc=0; "$bin/lockstep" report "$work/trace" -o "$work/job.html" 2>"$work/err" || rc=$?
[ $rc -eq 0 ] || fail "report exited $rc: $(cat "$work/err")"
head -c 15 "$work/job.html" | grep -q '<!DOCTYPE html>' || fail "job.html is not the page"
grep -q 'op_type' "$work/job.html" || fail "the page does not hold the divergence"
grep -q "wrote $work/job.html" "$work/err" || fail "no summary on stderr: $(cat "$work/err")"

# The page's CSP runs its own inline scripts by hash, never 'unsafe-inline' ones.
python3 - "$work/job.html" <<'PY' || fail "the page's script-src is not exactly its scripts' hashes"
import base64, hashlib, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)
script_src = [d for d in csp.split(";") if d.strip().startswith("script-src")][0].split()[1:]
want = ["'sha256-%s'" % base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()
        for b in re.findall(r"<script>(.*?)</script>", page, re.S)]
if "'unsafe-inline'" in script_src or sorted(script_src) != sorted(want) or not want:
    sys.exit("script-src %s, scripts hash to %s" % (script_src, want))
PY

rc=0; "$bin/lockstep" report "$work/trace" -o - >"$work/stdout.html" 2>/dev/null || rc=$?
[ $rc -eq 0 ] || fail "-o - exited $rc"
head -c 15 "$work/stdout.html" | grep -q '<!DOCTYPE html>' || fail "-o - did not write the page to stdout"
mkdir "$work/again"
"$bin/lockstep" report "$work/trace" -o "$work/again/job.html" 2>/dev/null
cmp -s "$work/job.html" "$work/again/job.html" || fail "the same trace gave two different pages"

rc=0; "$bin/lockstep" report "$work/none" -o "$work/none.html" 2>/dev/null || rc=$?
[ $rc -eq 2 ] || fail "a missing directory exited $rc, not 2"
[ ! -e "$work/none.html" ] || fail "a page was written for a missing directory"
rc=0; "$bin/lockstep" report "$work/trace" 2>/dev/null || rc=$?
[ $rc -eq 2 ] || fail "no -o exited $rc, not 2"
rc=0; "$bin/lockstep" report "$work/trace" -o "$work/no/such/dir/x.html" 2>/dev/null || rc=$?
[ $rc -eq 2 ] || fail "an unwritable output exited $rc, not 2"
echo PASS
