#!/usr/bin/env bash
# Review 2026-12-02, field (docs/review-2026-12-02-field.md): an on-call engineer's findings, one
# case per finding. Each case records real traces with the CPU NCCL fixture (or reads tests/data),
# puts them in the state the finding describes, and checks what the user reads. A case that fails
# on the reviewed code (main 58d7f27) is registered DISABLED in CMakeLists.txt: the lead enables
# it with the fix.
#
#   field_review.sh CASE LOCKSTEP BIN_DIR FIXTURE_LIB_DIR DATA_DIR REDIGEST
set -uo pipefail
case_name=$1 ls_bin=$2 bin=$3 fixture=$4 data=$5 redigest=$6
export LD_LIBRARY_PATH="$fixture${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bin:$PATH"
unset LOCKSTEP_DIR LOCKSTEP_HANG_TIMEOUT NO_COLOR LOCKSTEP_FIXTURE_MISMATCH
work=$(mktemp -d /tmp/field-review.XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }
expect() {  # expect NAME COMMAND...: passes when COMMAND succeeds
  local name=$1; shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}
run() {  # run NAME ARGS...: lockstep ARGS > NAME.out 2> NAME.err, sets rc
  local name=$1; shift
  "$ls_bin" "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  echo "--- lockstep $* (rc=$rc)"; cat -v "$work/$name.out" "$work/$name.err" | cut -c1-300 | head -40
}
has() { grep -qF -- "$2" "$work/$1.out" "$work/$1.err"; }
hasnt() { ! grep -qF -- "$2" "$work/$1.out" "$work/$1.err"; }
meta() { sqlite3 -cmd ".timeout 10000" "file:$1?mode=ro" "select value from meta where key='$2'"; }
# The file of global rank R in DIR.
rank_file() {
  for f in "$1"/*.lockstep.sqlite; do [ "$(meta "$f" global_rank)" = "$2" ] && echo "$f"; done
}
# A capped run (--max-mb 1) of 60,000 identical all_reduces on 2 ranks: most history retired.
capped_run() {  # capped_run DIR
  "$ls_bin" run -o "$1" --max-mb 1 -- lockstep-launch -n 2 --quiet --timeout 120 -- \
    recorder_fixture_program many 60000 >/dev/null 2>&1
  [ "$(ls "$1"/*.lockstep.sqlite 2>/dev/null | wc -l)" = 2 ] || { echo "premise: capped trace not recorded"; exit 1; }
}

# The capped run above with rank 1's checkpoints rewritten as if its collective #500 (long
# retired) had count 65: a silent divergence the cap retired, known only by digest.
retired_divergence() {  # retired_divergence DIR
  capped_run "$1"
  local f retired
  f=$(rank_file "$1" 1)
  retired=$(sqlite3 "$f" "select retired_collectives from comms where id=1")
  { echo "BEGIN;"
    "$redigest" 60000 500 "$retired" | awk '$1=="cp"{print "UPDATE checkpoints SET digest="$3" WHERE ordinal="$2";"}
                                          $1=="ret"{print "UPDATE comms SET retired_digest="$3" WHERE id=1;"}'
    echo "COMMIT;"; } | sqlite3 "$f"
}

# A healthy job (matching all_reduces, synchronized every 256) stopped by SIGNAL to every rank
# after 4 s, into DIR; retried (up to 5 times) until some rank had ops in flight at the stop
# (right after a synchronize none are: then the case would show nothing).
stopped_healthy_job() {  # stopped_healthy_job DIR SIGNAL
  local attempt launcher f inflight
  for attempt in 1 2 3 4 5; do
    rm -rf "$1"
    "$ls_bin" run -o "$1" -- lockstep-launch -n 2 --quiet --timeout 100 -- \
      recorder_fixture_program many 3000000 >/dev/null 2>&1 &
    launcher=$!
    sleep 4
    for p in $(pgrep -P "$launcher"); do kill -"$2" "$p"; done  # lockstep run execs the launcher
    wait "$launcher" 2>/dev/null
    inflight=0
    for f in "$1"/*.lockstep.sqlite; do
      inflight=$((inflight + $(sqlite3 "file:$f?mode=ro" "select count(*) from op_rows_all where done is null or done = 0")))
    done
    [ "$inflight" -gt 0 ] && { echo "attempt $attempt: $inflight ops in flight at the stop"; return 0; }
  done
  echo "premise: no attempt stopped the job with ops in flight"; exit 1
}

case "$case_name" in

# G1: a healthy job whose ranks are all SIGKILLed mid-run (OOM killer, lost node, scancel past
# KillWait) is not a hang: rank 0's wait is on rank 1 whose history after its last flush is lost.
# Today: "verdict: hang", exit 1.
g1_sigkilled_healthy_job_is_not_a_hang)
  stopped_healthy_job "$work/t" KILL
  expect "premise: two trace files" [ "$(ls "$work"/t/*.lockstep.sqlite | wc -l)" = 2 ]
  run a analyze "$work/t"
  expect "premise: both ranks' traces end without an exit record" has a "trace ends without an exit record"
  expect "analyze does not exit 1 (hang) on a killed healthy job (rc=$rc)" [ "$rc" != 1 ]
  expect "verdict line is not 'hang'" hasnt a "verdict: hang"
  expect "analyze exits 4 (incomplete evidence) (rc=$rc)" [ "$rc" = 4 ]
  ;;

# G1 (the common case): the same healthy job ended by SIGTERM (Slurm's time limit, scancel,
# Ctrl-C): every trace is complete (exit records), and the ops in flight at the signal are a
# normal GPU queue, not a hang (no hang timeout fired, the oldest op was issued milliseconds
# before the stop). Today: "HANG: 2 blocked ... verdict: hang", exit 1.
g1_sigterm_of_a_healthy_job_is_not_a_hang)
  stopped_healthy_job "$work/t" TERM
  expect "premise: two trace files" [ "$(ls "$work"/t/*.lockstep.sqlite | wc -l)" = 2 ]
  for f in "$work"/t/*.lockstep.sqlite; do
    expect "premise: $(basename "$f") exit_reason SIGTERM" [ "$(meta "$f" exit_reason)" = SIGTERM ]
  done
  run a analyze "$work/t"
  expect "analyze does not exit 1 (hang) on a healthy job ended by SIGTERM (rc=$rc)" [ "$rc" != 1 ]
  expect "verdict line is not 'hang'" hasnt a "verdict: hang"
  ;;

# G2: a Flight Recorder dump in a directory of lockstep traces is named by its own path, not by
# the deleted temporary file it was converted to (not reproducible, points nowhere).
g2_flight_recorder_dump_is_named_by_its_path)
  capped_run "$work/t"
  cp "$data/fr-h200/ws1-completed/nccl_trace_rank_0" "$work/t/"
  run a analyze "$work/t"
  expect "premise: rank 0 claimed twice, exit 4 (rc=$rc)" [ "$rc" = 4 ]
  expect "text names no temporary lockstep-fr-* path" hasnt a "/lockstep-fr-"
  expect "text names the dump by its path" has a "$work/t/nccl_trace_rank_0"
  run j analyze --json "$work/t"
  expect "json names no temporary lockstep-fr-* path" hasnt j "/lockstep-fr-"
  ;;

# G3: a job whose ranks all end without an exit record prints one line per rank (4,096 lines
# at 4,096 ranks before the verdict; the report lists 200 identical issues). Identical gaps of
# many ranks are grouped ("ranks 0-63: trace ends without an exit record ...").
g3_identical_gaps_of_many_ranks_are_grouped)
  gen_trace "$work/t" --ranks 64 --ops 200 --diverge-from-end 20 >/dev/null 2>&1
  run a analyze "$work/t"
  expect "premise: exit 1 (rc=$rc)" [ "$rc" = 1 ]
  n=$(grep -c "^incomplete: rank [0-9]*: trace ends without an exit record" "$work/a.out")
  expect "at most 4 per-rank 'trace ends without an exit record' lines for 64 ranks (got $n)" [ "$n" -le 4 ]
  expect "the gap is named for the ranks as a range" grep -qE "ranks 0-63.*trace ends without an exit record" "$work/a.out"
  verdict=$(grep "^verdict:" "$work/a.out")
  expect "verdict line groups the gap (no 'rank 0: ...; rank 1: ...; 62 more')" \
    bash -c '! grep -qF "62 more" <<<"$0"' "$verdict"
  ;;

# G4: a divergence in history the size cap retired (found by digest, rightly): the report's ladder
# says "2 more members agree with the majority (not drawn)" of a 2-rank communicator whose two
# members are on the two sides.
g4_report_digest_mismatch_invents_a_majority)
  retired_divergence "$work/t"
  run a analyze "$work/t"
  expect "premise: analyze finds the retired divergence by digest, exit 1 (rc=$rc)" [ "$rc" = 1 ]
  expect "premise: between collective ordinals 1 and 1024" has a "between collective ordinals 1 and 1024"
  run r report "$work/t" -o "$work/r.html"
  more=$(grep -o '"more_sides":[0-9]*' "$work/r.html" | head -1)
  expect "report: no member of the 2-rank communicator is counted as 'more members agree' ($more)" \
    [ "${more:-\"more_sides\":0}" = '"more_sides":0' ]
  ;;

# G5: the reproducer's README says it runs under srun ("srun -n 2 env LOCKSTEP_RENDEZVOUS_DIR=...
# RANK=... ./repro"), but repro.c reads only RANK/WORLD_SIZE: every task exits 2. It should read
# Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID as examples/common/bootstrap.h does.
g5_shrink_reproducer_runs_under_slurm_variables)
  "$ls_bin" shrink "$data/h200x2-fsdp-ulysses-broken" -o "$work/repro" --no-replay -q >/dev/null 2>&1
  expect "premise: repro.c written" [ -f "$work/repro/repro.c" ]
  cc "$work/repro/repro.c" -o "$work/repro/repro" -I/usr/local/cuda/include -L"$fixture" \
    -l:libnccl.so.2 -l:libcuda.so.1 -Wl,-rpath,"$fixture" || { bad "premise: repro.c builds"; exit 1; }
  mkdir -p "$work/rdv"
  for t in 0 1; do
    env -u RANK -u WORLD_SIZE -u LOCAL_RANK SLURM_PROCID=$t SLURM_NTASKS=2 SLURM_LOCALID=$t \
      LOCKSTEP_RENDEZVOUS_DIR="$work/rdv" timeout 5 "$work/repro/repro" >"$work/task$t.out" 2>&1 &
  done
  wait
  cat "$work/task0.out" "$work/task1.out"
  expect "task 0 issues its ops under Slurm's variables" grep -q "rank 0: all ops issued" "$work/task0.out"
  expect "task 1 issues its ops under Slurm's variables" grep -q "rank 1: all ops issued" "$work/task1.out"
  ;;

# G6: timeline --text on the same directory: the analyzer says the members diverge in retired
# history; the timeline says "(no divergence on this communicator)" and exits 0.
g6_timeline_does_not_deny_a_retired_divergence)
  retired_divergence "$work/t"
  run a analyze "$work/t"
  expect "premise: analyze finds the retired divergence, exit 1 (rc=$rc)" [ "$rc" = 1 ]
  run t timeline --text "$work/t"
  expect "timeline --text does not say 'no divergence'" hasnt t "no divergence"
  expect "timeline --text names the divergence known by digest" has t "digest"
  ;;

# G7: stacks/ops at a seq the size cap retired: "rank 0: no op with seq 500 (issued 23136 ops on
# this comm)" -- the rank issued 60,000; seq 500 was retired (kept: the newest). Say so.
g7_stacks_and_ops_name_a_retired_seq)
  capped_run "$work/t"
  run s stacks "$work/t" --comm init0 --seq 500
  expect "stacks says seq 500 was retired by the size cap" has s "retired"
  expect "stacks does not say 'issued 2xxxx ops on this comm' for a rank that issued 60000" \
    bash -c '! grep -qE "issued 2[0-9]{4} ops on this comm" "$0" "$1"' "$work/s.out" "$work/s.err"
  run o ops "$work/t" --rank 1 --around 500
  expect "ops says seq 500 was retired by the size cap" has o "retired"
  ;;

# G8: the report's "N communicators (unusual first)" table of a split family lists 200 of them and
# leaves out the one communicator that diverged (all are "blocked", so none ranks as unusual), and
# the summary does not say that only 200 of 256 are listed.
g8_report_lists_the_divergent_communicator)
  gen_trace "$work/t" --ranks 512 --tp 2 --ops 200 --diverge-from-end 20 >/dev/null 2>&1
  run a analyze "$work/t"
  expect "premise: divergence on a tp communicator (rc=$rc)" grep -q "^FIRST DIVERGENCE: comm .*init0.split0" "$work/a.out"
  hash=$(sed -n 's/^FIRST DIVERGENCE: comm \([0-9a-f]*\) .*/\1/p' "$work/a.out")
  run r report "$work/t" -o "$work/r.html"
  python3 - "$work/r.html" "$hash" <<'PY' >"$work/listed.txt"
import re, sys
page, h = open(sys.argv[1]).read(), sys.argv[2]
for m in re.finditer(r'"comms":\{"count":(\d+),"list":\[', page):
    n = int(m.group(1))
    if n > 200:
        body = page[m.end():]
        depth, i = 1, 0
        while depth and i < len(body):
            depth += {'[': 1, ']': -1}.get(body[i], 0); i += 1
        listed = re.findall(r'"hash":"([0-9a-f]+)"', body[:i])
        print(n, len(listed), any(x.startswith(h) for x in listed))
PY
  cat "$work/listed.txt"
  expect "premise: a family of more than 200 communicators" [ -s "$work/listed.txt" ]
  expect "the divergent communicator $hash is listed in its family's table" grep -q " True$" "$work/listed.txt"
  ;;

# G15: replay --model on the same directory: "can complete (47296 ops)", exit 0, with no word that
# it checked only the retained window (#36865..60000) nor that the members' digests disagree
# before it (the analyzer's finding).
g15_model_check_names_the_window_and_the_retired_divergence)
  retired_divergence "$work/t"
  run m replay --model "$work/t"
  expect "premise: the model says the retained schedule can complete (rc=$rc)" has m "can complete"
  expect "replay --model says it checked only the retained collectives" has m "retired"
  expect "replay --model names the divergence known by digest" has m "digest"
  expect "replay --model does not pass (exit 0) over a retired divergence: incomplete, exit 4 (rc=$rc)" [ "$rc" = 4 ]
  run j replay --model --json "$work/t"
  expect "replay --model --json carries the retired history and the digest mismatch" \
    python3 -c 'import json, sys; h = json.load(open(sys.argv[1]))["retired_history"]; sys.exit(not (h["windows"] and h["digest_mismatch"]))' "$work/j.out"
  ;;

# G13: a job restarted into the same directory: the two runs are told apart by when they started.
g13_restarts_name_when_each_group_started)
  for n in 1 2; do
    "$ls_bin" run -o "$work/rs" -- lockstep-launch -n 2 --quiet --timeout 60 -- \
      seed_deadlock --fixed --steps 2 >/dev/null 2>&1
    sleep 1
  done
  expect "premise: two runs of 2 ranks in one directory" [ "$(ls "$work"/rs/*.lockstep.sqlite | wc -l)" = 4 ]
  run a analyze "$work/rs"
  expect "premise: incomplete, exit 4 (rc=$rc)" [ "$rc" = 4 ]
  expect "premise: the groups are named" has a "separate jobs?"
  expect "each group's start time is named" \
    [ "$(grep -oE '\} started [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC' "$work/a.out" | sort -u | wc -l)" = 2 ]
  expect "the line says what to do" has a "move the other group's files"
  ;;

# G9 (first part): a capped run's op count is what the files retain, not what the job issued.
g9_capped_counts_say_retained)
  capped_run "$work/cap"
  run a analyze "$work/cap"
  expect "premise: clean (rc=$rc)" [ "$rc" = 0 ]
  retired=0
  for f in "$work"/cap/*.lockstep.sqlite; do retired=$((retired + $(meta "$f" retired_ops))); done
  expect "premise: the cap retired ops ($retired)" [ "$retired" -gt 0 ]
  expect "the count says retained, and how many were retired" has a "ops retained ($retired retired by the size cap)"
  ;;

*) echo "unknown case $case_name"; exit 2 ;;
esac
[ "$fails" = 0 ]
