#!/usr/bin/env bash
# The report page in a real browser: records (or generates) a trace, writes `lockstep report`,
# loads the page in headless Chromium and checks that its script ran to the end without an
# error (a marker element, no error flag, no console message at all: the page logs nothing)
# and that the key elements are there (DOM after the script ran).
#
#   browser_test.sh CASE BUILD_BIN FIXTURE_LIB_DIR [--ranks N] [--screenshot FILE WIDTHxHEIGHT] [--keep DIR]
#   CASE: seed (the seed demo on the CPU fixture), cycle (a cross-communicator wait-for cycle),
#         synthetic (gen_trace: --ranks ranks, default 16,384; one host without trace files, one
#         host behind)
set -euo pipefail
case_name=$1 bin=$2 fixture_lib=$3
shift 3
screenshot="" size="1400x2400" keep="" ranks=16384
while (($#)); do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --screenshot) screenshot=$2 size=$3; shift 3 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$chromium" ]; then
  echo "FAIL: chromium not found (scripts/setup.sh --test installs Debian's chromium)" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-report-browser-XXXXXX")
trap 'rm -rf "$work"' EXIT
trace=$work/trace
fail() { echo "FAIL ($case_name): $*" >&2; exit 1; }

record() {  # record NAME TIMEOUT -- PROGRAM ARGS...
  local timeout=$1; shift
  set +e
  LD_LIBRARY_PATH=$fixture_lib LOCKSTEP_PRELOAD=$bin/../lib/liblockstep.so \
    "$bin/lockstep" run -o "$trace" --stacks native -- "$bin/lockstep-launch" -n 2 --timeout "$timeout" --quiet -- "$@" \
    >"$work/run.out" 2>&1
  local rc=$?
  set -e
  [ $rc -eq 124 ] || { cat "$work/run.out" >&2; fail "the recorded job should hang and be stopped (exit 124), got $rc"; }
}

case $case_name in
  seed) record 4 "$bin/seed_deadlock" --layers 2 --diverge-at 41 ;;
  cycle) record 3 "$bin/lockstep_e2e_scenarios" cycle ;;
  synthetic)
    # 16,384 small files (~390 MB): on the disk, SQLite's fdatasync of each new file's header
    # made this the suite's slowest step (~80 s of ~110 s on the 2-core CI machine). The same
    # files on tmpfs (no sync, same bytes) when it has room; the report reads them the same way.
    if [ -w /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt 1048576 ]; then
      shm=$(mktemp -d /dev/shm/lockstep-report-browser-XXXXXX)
      trap 'rm -rf "$work" "$shm"' EXIT
      trace=$shm/trace
    fi
    "$bin/gen_trace" "$trace" --ranks "$ranks" --ops 16 --diverge-from-end 8 --threads 2 --rank-names >/dev/null
    # A host whose processes left no file (ranks M..M+7; 8000-8007 of 16,384), and one whose GPU
    # work stopped early (ranks M+8..M+15: nothing completed from their 5th op on).
    m=$((ranks / 2 - 192))
    # A page with one element per rank has more than $ranks; the aggregated one stays far below.
    MAX_NODES=$((ranks < 5000 ? ranks : 5000))
    for ((r = m; r < m + 8; ++r)); do rm -f "$trace/rank-$r.lockstep.sqlite"; done
    python3 "$(dirname "$0")/host_behind.py" "$trace" $((m + 8)) 14
    ;;
  *) fail "unknown case" ;;
esac

html=$work/report.html
start=$(date +%s.%N)
"$bin/lockstep" report "$trace" -o "$html" --timing 2>"$work/report.err" || { cat "$work/report.err" >&2; fail "lockstep report failed"; }
end=$(date +%s.%N)
echo "report: $(stat -c %s "$html") bytes in $(awk "BEGIN{printf \"%.2f\", $end - $start}") s; $(grep "lockstep report: load" "$work/report.err" || true)"

run_chromium() {  # run_chromium PAGE OUT_DOM OUT_LOG [extra flags]
  local page=$1 dom=$2 log=$3; shift 3
  local profile
  profile=$(mktemp -d "$work/profile-XXXXXX")
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$profile" \
    --enable-logging=stderr --v=0 --virtual-time-budget=15000 --window-size=1400,2400 "$@" \
    "file://$page" >"$dom" 2>"$log" || true
}

# Checks a dumped DOM and the browser's log; prints what is wrong, nothing when all is well.
problems() {  # problems DOM LOG
  local dom=$1 log=$2
  grep -q 'id="report-ready"' "$dom" || echo "the page's script did not finish (no #report-ready)"
  if grep -q 'data-report-error="1"' "$dom"; then echo "the page flagged a script error: $(grep -o 'id="report-errors"[^<]*>[^<]*' "$dom" | head -1)"; fi
  if grep -q 'CONSOLE' "$log"; then echo "console output: $(grep 'CONSOLE' "$log" | head -3)"; fi
}

# The check itself can fail: a page whose script throws is caught.
if [ "$case_name" = seed ]; then
  sed 's|guarded(.timeline., renderTimeline);|guarded("timeline", renderTimeline); null.boom;|' "$html" >"$work/broken.html"
  cmp -s "$html" "$work/broken.html" && fail "could not make the broken copy of the page"
  run_chromium "$work/broken.html" "$work/broken.dom" "$work/broken.log" --dump-dom
  [ -n "$(problems "$work/broken.dom" "$work/broken.log")" ] || fail "a page that throws passed the check"
fi

run_chromium "$html" "$work/dom.html" "$work/chromium.log" --dump-dom
[ -s "$work/dom.html" ] || { cat "$work/chromium.log" >&2; fail "chromium produced no DOM"; }
p=$(problems "$work/dom.html" "$work/chromium.log")
[ -z "$p" ] || fail "$p"

need() {  # need PATTERN MIN WHAT
  local n
  n=$({ grep -o "$1" "$work/dom.html" || true; } | wc -l)
  [ "$n" -ge "$2" ] || fail "expected at least $2 of $3 ($1), found $n"
}
need 'id="evidence"' 1 "the evidence table"
need 'class="badge v-problems"' 1 "the verdict badge (problems)"
need '<canvas' 5 "heat strips"
need 'class="groups"' 1 "groups of identical ranks"
need 'id="waitgraph-svg"' 1 "the wait-for graph"
need 'id="timeline-svg"' 1 "the inline timeline"
need '<pre class="cmd mono">lockstep timeline ' 1 "the pointer to lockstep timeline -o"
case $case_name in
  seed)
    need 'class="finding" data-kind="op_type"' 1 "the divergence ladder (op_type)"
    need 'class="op[a-z ]* at"' 2 "the two ops at the divergence"
    need 'class="diff"' 2 "the mismatching field highlighted"
    ;;
  cycle)
    need 'class="cycle bad" data-cycle="2"' 1 "the two-hop wait-for cycle"
    need 'class="edge cycle-edge"' 2 "the cycle's edges"
    need '<text[^>]*>host ' 1 "ranks grouped by host"
    ;;
  synthetic)
    need 'class="finding" data-kind="op_type"' 1 "the divergence ladder"
    need "$m-$((m + 7))" 1 "the missing host's ranks"
    need "$((m + 8))-$((m + 15))" 1 "the host that stopped early, as its own group"
    need 'class="badge v-problems"' 1 "the verdict"
    # A few DOM nodes, not one per rank.
    nodes=$({ grep -o '<[a-z]' "$work/dom.html" || true; } | wc -l)
    echo "DOM: $nodes elements for $ranks ranks"
    [ "$nodes" -lt "$MAX_NODES" ] || fail "$nodes elements for $ranks ranks: the page must aggregate"
    ;;
esac

if [ -n "$screenshot" ]; then
  profile=$(mktemp -d "$work/profile-XXXXXX")
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$profile" \
    --hide-scrollbars --virtual-time-budget=15000 --window-size="${size/x/,}" --screenshot="$screenshot" \
    "file://$html" >/dev/null 2>&1 || fail "screenshot failed"
  echo "screenshot: $screenshot"
fi
if [ -n "$keep" ]; then mkdir -p "$keep" && cp "$html" "$keep/$case_name.html"; fi
echo "PASS ($case_name)"
