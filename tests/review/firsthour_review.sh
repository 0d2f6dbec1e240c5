#!/usr/bin/env bash
# Review 2026-12-03 (docs/review-2026-12-03.md): a new user's first hour, one case per finding.
# Each case records real traces with the CPU NCCL fixture (or reads tests/data), damages them
# as the finding says, and checks what the user reads. A case that fails on the reviewed code is
# registered DISABLED in CMakeLists.txt with its finding: the lead enables it with the fix.
#
#   firsthour_review.sh CASE LOCKSTEP BIN_DIR FIXTURE_LIB_DIR DATA_DIR DOCS_DIR
set -uo pipefail
case_name=$1 ls_bin=$2 bin=$3 fixture=$4 data=$5 docs=$6
export LD_LIBRARY_PATH="$fixture${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bin:$PATH"
unset LOCKSTEP_DIR LOCKSTEP_HANG_TIMEOUT NO_COLOR
work=$(mktemp -d /tmp/firsthour-review.XXXXXX)
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
  echo "--- lockstep $* (rc=$rc)"; cat -v "$work/$name.out" "$work/$name.err" | head -40
}
has() { grep -qF -- "$2" "$work/$1.out" "$work/$1.err"; }
hasnt() { ! grep -qF -- "$2" "$work/$1.out" "$work/$1.err"; }

# The seed deadlock, both ranks stopped by the launcher: a complete, divergent trace.
seed_broken() {  # seed_broken DIR
  # The recorder's hang timeout (1 s) fires before the launcher stops the job (4 s): the marker
  # proves the hang (a job stopped seconds after its last op is otherwise only "in flight").
  LOCKSTEP_HANG_TIMEOUT=1 "$ls_bin" run -o "$1" -- lockstep-launch -n 2 --quiet --timeout 4 -- seed_deadlock >/dev/null 2>&1
  [ "$(ls "$1"/*.lockstep.sqlite 2>/dev/null | wc -l)" = 2 ] || { echo "premise: seed trace not recorded"; exit 1; }
}
# The file of global rank R in DIR.
rank_file() {
  python3 - "$1" "$2" <<'EOF'
import sqlite3, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*.lockstep.sqlite")):
    c = sqlite3.connect("file:" + f + "?mode=ro", uri=True)
    if c.execute("select value from meta where key='global_rank'").fetchone()[0] == sys.argv[2]:
        print(f)
EOF
}

case "$case_name" in

# F1: rank 1's file is gone; rank 0's hang line must not claim "every peer issued it".
f1_missing_member_is_not_every_peer_issued_it)
  seed_broken "$work/t"
  rm "$(rank_file "$work/t" 1)"
  run a analyze "$work/t"
  expect "premise: exit 1 (rc=$rc)" [ "$rc" = 1 ]
  expect "text: no 'every peer issued it' for a member without a file" hasnt a "every peer issued it"
  expect "text: rank 0's hang line names comm rank 1 (no trace file)" \
    grep -qE "rank 0: blocked in reduce_scatter.*rank 1" "$work/a.out"
  run j analyze --json "$work/t"
  expect "json: hang.groups summary does not say 'every peer issued it'" hasnt j "every peer issued it"
  ;;

# F2: torch's own watchdog dump (all_reduce seq 2 timed out, 4 ops in flight) is not "no hang".
f2_flight_recorder_watchdog_dump_is_not_clean)
  run a analyze "$data/fr-h200/ws1-watchdog"
  expect "text does not say 'no hang'" hasnt a "no hang"
  expect "text names the stuck op: all_reduce seq 2" grep -qE "all_reduce.*seq 2" "$work/a.out"
  ;;

# F3: stacks on a communicator one of whose members' file was skipped: that member is named.
f3_stacks_names_a_member_without_a_usable_file)
  seed_broken "$work/t"
  truncate -s 50000 "$(rank_file "$work/t" 1)"
  run s stacks "$work/t" --comm init0 --seq 3750
  expect "stacks names rank 1 (its file skipped)" grep -qE "rank 1|skipped" "$work/s.out" "$work/s.err"
  expect "stacks does not exit 0 on incomplete evidence (rc=$rc)" [ "$rc" != 0 ]
  ;;

# F4: ops --rank 1 when rank 1's file exists but is truncated: say so, not "no trace of rank 1".
f4_ops_names_the_skipped_file_of_the_rank)
  seed_broken "$work/t"
  f=$(rank_file "$work/t" 1)
  truncate -s 50000 "$f"
  run o ops "$work/t" --rank 1
  expect "ops names the skipped file $(basename "$f")" has o "$(basename "$f")"
  ;;

# F5: doctor on a directory of unreadable files: no empty fields, not exit 0.
f5_doctor_on_unreadable_files)
  mkdir -p "$work/u"
  python3 -c "import sqlite3; c=sqlite3.connect('$work/u/x.lockstep.sqlite'); c.execute('create table foo(a)'); c.commit()"
  run d doctor "$work/u"
  expect "doctor exits non-zero when no file is usable (rc=$rc)" [ "$rc" != 0 ]
  expect "doctor prints no empty 'rank , pid  on '" hasnt d "rank , pid  on"
  ;;

# F6: each subcommand's --help gives its own exit codes; docs/cli.md lists every subcommand.
f6_help_and_docs_agree)
  for c in stacks ops timeline doctor shrink; do
    run h "$c" --help
    expect "$c --help: not the global table (mentions 'check --baseline')" hasnt h "check --baseline"
  done
  for c in report doctor shrink import; do
    expect "docs/cli.md synopsis lists 'lockstep $c'" grep -q "^lockstep $c" "$docs/cli.md"
  done
  expect "docs/cli.md synopsis lists run --max-mb" grep -q "^lockstep run .*--max-mb" "$docs/cli.md"
  ;;

# F8: two jobs' files in one directory: the groups of the "separate jobs?" line are told apart.
f8_two_jobs_are_told_apart)
  seed_broken "$work/t"
  "$ls_bin" run -o "$work/t" -- lockstep-launch -n 2 --quiet --timeout 60 -- seed_deadlock --fixed >/dev/null 2>&1
  run a analyze "$work/t"
  expect "premise: exit 1 (rc=$rc)" [ "$rc" = 1 ]
  expect "the two groups are not printed identically" hasnt a "{rank 0, rank 1} {rank 0, rank 1}"
  expect "no bare 'ranks 0-1: finished' when two processes claim each rank" hasnt a "ranks 0-1: finished"
  ;;

# F9: replay --model with a rank's file missing: the first line is not a bare "deadlock".
f9_model_check_headline_on_missing_rank)
  seed_broken "$work/t"
  rm "$(rank_file "$work/t" 1)"
  run m replay --model "$work/t"
  expect "premise: exit 4 (rc=$rc)" [ "$rc" = 4 ]
  expect "first line of stdout says incomplete, not 'model check: deadlock'" \
    bash -c "head -n1 '$work/m.out' | grep -q incomplete"
  ;;

# F10: replay's incomplete-evidence message prints a newline, not a literal backslash-n.
f10_replay_message_has_no_literal_backslash_n)
  seed_broken "$work/t"
  rm "$(rank_file "$work/t" 1)"
  run r replay "$work/t" --timeout 5
  expect "premise: exit 4 (rc=$rc)" [ "$rc" = 4 ]
  expect "no literal \\n in the message" hasnt r '\n'
  ;;

# F11: shrink on incomplete evidence names what is missing and exits 4.
f11_shrink_on_incomplete_evidence)
  seed_broken "$work/t"
  rm "$(rank_file "$work/t" 1)"
  run s shrink "$work/t" -o "$work/repro" --no-replay -q
  expect "shrink exits 4 on incomplete evidence (rc=$rc)" [ "$rc" = 4 ]
  expect "shrink names the missing member (no trace file / rank 1)" grep -qE "no trace file|rank 1" "$work/s.err" "$work/s.out"
  ;;

# F12: every rank died of a signal before its first NCCL op: the report says so.
f12_clean_verdict_names_dead_ranks)
  (ulimit -f 100; "$ls_bin" run -o "$work/t" -- lockstep-launch -n 2 --quiet --timeout 60 -- seed_deadlock --fixed >/dev/null 2>&1)
  run a analyze "$work/t"
  expect "premise: both files say exit_reason SIGXFSZ" \
    [ "$(python3 -c "
import sqlite3,glob
print(sum(sqlite3.connect(f).execute(\"select value from meta where key='exit_reason'\").fetchone()[0]=='SIGXFSZ' for f in glob.glob('$work/t/*.lockstep.sqlite')))")" = 2 ]
  expect "text names the signal the ranks died of" has a "SIGXFSZ"
  ;;

# F25: a file name with terminal escapes reaches the terminal raw through doctor.
f25_doctor_escapes_file_names)
  mkdir -p "$work/e"
  python3 -c "import sqlite3; c=sqlite3.connect('$work/e/x.lockstep.sqlite'); c.execute('create table foo(a)'); c.commit()"
  mv "$work/e/x.lockstep.sqlite" "$work/e/evil$(printf '\033')[31mRED$(printf '\007')x.lockstep.sqlite"
  run d doctor "$work/e"
  expect "doctor prints no raw ESC" bash -c "! grep -qa \$'\\x1b' '$work/d.out' '$work/d.err'"
  expect "doctor prints no raw BEL" bash -c "! grep -qa \$'\\x07' '$work/d.out' '$work/d.err'"
  run a analyze "$work/e"
  expect "premise: analyze escapes it (no raw ESC)" bash -c "! grep -qa \$'\\x1b' '$work/a.out' '$work/a.err'"
  ;;

# F26: capped runs: check --baseline says "matches" over a window holding the divergence.
f26_baseline_does_not_match_over_a_divergence)
  "$ls_bin" run -o "$work/fixed" --max-mb 1 -- lockstep-launch -n 2 --quiet --timeout 60 -- \
    seed_deadlock --fixed --steps 250 --diverge-at 40002 >/dev/null 2>&1
  # The launcher's timeout ends the hung job; 15 s leaves a loaded CI machine time to reach #40002.
  "$ls_bin" run -o "$work/broken" --max-mb 1 -- lockstep-launch -n 2 --quiet --timeout 15 -- \
    seed_deadlock --steps 250 --diverge-at 40002 >/dev/null 2>&1
  run w check "$work/fixed" --write-baseline "$work/fixed.baseline"
  expect "premise: baseline written from the fixed run (rc=$rc)" [ "$rc" = 0 ]
  run c check "$work/broken" --baseline "$work/fixed.baseline"
  expect "premise: exit 1, divergence at seq 40002 (rc=$rc)" [ "$rc" = 1 ]
  # (On e7d401e the windows were compared, #28673..#40002, and the line said "matches"; the fix
  # does not compare the schedule of ranks that disagree, and says so.)
  expect "says the baseline was not compared, since the ranks disagree" has c "not compared: the ranks disagree"
  expect "no 'schedule matches baseline' over a window where rank 1 differs from it" \
    hasnt c "schedule matches baseline"
  ;;

# F27: the communicator label a HANG line prints is not accepted by --comm.
f27_hang_line_comm_label_is_a_valid_selector)
  "$ls_bin" run -o "$work/t" -- lockstep-launch -n 2 --quiet --timeout 4 -- graph_alltoall --invert-at 2 >/dev/null 2>&1
  run a analyze "$work/t"
  expect "premise: exit 1 (rc=$rc)" [ "$rc" = 1 ]
  label=$(grep -o "rank 1: blocked in all_reduce on comm [^ ]* seq 2" "$work/a.out" | sed 's/.* on comm \([^ ]*\) seq 2/\1/')
  expect "premise: the HANG line names rank 1's communicator ('$label')" [ -n "$label" ]
  run s stacks "$work/t" --comm "$label" --seq 2
  expect "stacks --comm '$label' --seq 2 works (rc=$rc)" [ "$rc" = 0 ]
  run o ops "$work/t" --rank 1 --around 2 --comm "$label"
  expect "ops --rank 1 --around 2 --comm '$label' works (rc=$rc)" [ "$rc" = 0 ]
  run x timeline "$work/t" --text --comm "$label"
  expect "timeline --text --comm '$label' works (rc=$rc)" [ "$rc" = 0 ]
  expect "timeline's error has no literal \\n" hasnt x '\n'
  ;;

*) echo "unknown case $case_name"; exit 2 ;;
esac
echo "$fails failure(s)"
[ "$fails" = 0 ]
