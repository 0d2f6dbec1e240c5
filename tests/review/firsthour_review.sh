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
  # The canonical schedule is the member's that retains the longest history: rank 0's (equal to
  # the baseline: "not compared") or, when the cap left rank 1 more, rank 1's ("differs"). Both
  # are honest; a match is not (CI failure of stop 27: rank 1 had retained more).
  expect "says the baseline was not compared since the ranks disagree, or that it differs" \
    grep -qE "not compared: the ranks disagree|schedule differs from baseline" "$work/c.out"
  expect "no 'schedule matches baseline' over a window where rank 1 differs from it" \
    hasnt c "schedule matches baseline"
  ;;

# F27: the communicator label a HANG line prints is not accepted by --comm.
f27_hang_line_comm_label_is_a_valid_selector)
  "$ls_bin" run -o "$work/t" -- lockstep-launch -n 2 --quiet --timeout 4 -- graph_alltoall --invert-at 2 >/dev/null 2>&1
  run a analyze "$work/t"
  expect "premise: exit 1 (rc=$rc)" [ "$rc" = 1 ]
  # The selector is the first word after "comm" (identity.h comm_label: "comm HASH (ROLE)").
  label=$(grep -o "rank 1: blocked in all_reduce on comm [^ ]*" "$work/a.out" | sed 's/.* on comm //')
  expect "premise: the HANG line names rank 1's communicator ('$label')" [ -n "$label" ]
  run s stacks "$work/t" --comm "$label" --seq 2
  expect "stacks --comm '$label' --seq 2 works (rc=$rc)" [ "$rc" = 0 ]
  run o ops "$work/t" --rank 1 --around 2 --comm "$label"
  expect "ops --rank 1 --around 2 --comm '$label' works (rc=$rc)" [ "$rc" = 0 ]
  run x timeline "$work/t" --text --comm "$label"
  expect "timeline --text --comm '$label' works (rc=$rc)" [ "$rc" = 0 ]
  expect "timeline's error has no literal \\n" hasnt x '\n'
  ;;

# F15: one unfinished op, one word: analyze, stacks, ops and timeline --text at the seed's
# stuck seq 3750 all say "in flight"; none says "not completed" or a bare "[enqueued]".
f15_one_word_for_an_unfinished_op)
  seed_broken "$work/t"
  run a analyze "$work/t"
  run s stacks "$work/t" --comm init0 --seq 3750
  run o ops "$work/t" --rank 0 --around 3750
  run x timeline "$work/t" --text
  for v in a s o x; do
    expect "$v: says 'in flight'" has $v "in flight"
    expect "$v: no 'not completed'" hasnt $v "not completed"
    expect "$v: no bare '[enqueued]'" hasnt $v "[enqueued]"
  done
  # graph_alltoall --invert-at 2: the in-flight op in "ops just before" has its state too.
  "$ls_bin" run -o "$work/g" --hang-timeout 2 -- lockstep-launch -n 2 --quiet --timeout 6 -- graph_alltoall --invert-at 2 >/dev/null 2>&1
  run g analyze "$work/g"
  expect "premise: exit 1 (rc=$rc)" [ "$rc" = 1 ]
  expect "premise: 'ops just before' listed" has g "ops just before on rank"
  expect "every line of 'ops just before' names the op's state" \
    bash -c "! sed -n '/ops just before/,/^  [a-z]/p' '$work/g.out' | grep -E '^    seq ' | grep -vqE '(completed|in flight|issued)\$'"
  ;;

# F16: one report names a communicator one way, "comm HASH8 (ROLE)", on every line (divergence,
# HANG, cycle, verdict); the recorder's hang line uses the same 8 hex digits and "count=".
f16_one_label_per_communicator)
  "$ls_bin" run -o "$work/t" --hang-timeout 1 -- lockstep-launch -n 2 --timeout 6 -- seed_deadlock >"$work/r.out" 2>"$work/r.err"
  run a analyze "$work/t"
  expect "premise: exit 1 (rc=$rc)" [ "$rc" = 1 ]
  h=$(grep -oE "comm [0-9a-f]{8} \(init0\)" "$work/a.out" | head -1)
  expect "premise: the divergence names '$h'" [ -n "$h" ]
  expect "FIRST DIVERGENCE line: $h" grep -qF "FIRST DIVERGENCE: $h seq 3750" "$work/a.out"
  expect "HANG lines: $h" grep -qE "rank 0: blocked in reduce_scatter on $(printf %s "$h" | sed 's/[()]/\\&/g') seq 3750" "$work/a.out"
  expect "cycle line: $h" grep -qF "(reduce_scatter on $h seq 3750)" "$work/a.out"
  expect "verdict line: $h" grep -qF "verdict: first divergence: op type on $h seq 3750" "$work/a.out"
  expect "no other form (role without hash, 'role init0')" bash -c "! grep -qE 'on comm init0 |role init0' '$work/a.out'"
  hash=$(printf %s "$h" | cut -d' ' -f2)
  expect "recorder's hang line: 'comm $hash seq', 'count='" grep -qE "in flight: comm $hash seq [0-9]+ [a-z_]+ count=[0-9]+" "$work/r.err"
  run s stacks "$work/t" --comm "$hash" --seq 3750
  expect "stacks: $h" has s "$h seq 3750"
  run x timeline "$work/t" --text
  expect "timeline --text: $h" has x "$h, 2 ranks"
  ;;

# F19: timeline --text honours --from-seq/--to-seq, and names the communicators it does not show.
f19_timeline_text_seq_range_and_other_comms)
  seed_broken "$work/t"
  run x timeline "$work/t" --text --from-seq 3700 --to-seq 3702
  expect "premise: exit 0 (rc=$rc)" [ "$rc" = 0 ]
  expect "rows 3700..3702 shown" bash -c "grep -qE '^3700 ' '$work/x.out' && grep -qE '^3702 ' '$work/x.out'"
  expect "no row outside 3700..3702" bash -c "! grep -qE '^(3699|3703|3750) ' '$work/x.out'"
  run y timeline "$work/t" --text --from-seq 3702 --to-seq 3700
  expect "--from-seq after --to-seq: exit 2 (rc=$rc)" [ "$rc" = 2 ]
  "$ls_bin" run -o "$work/g" -- lockstep-launch -n 2 --quiet --timeout 30 -- graph_alltoall >/dev/null 2>&1
  run g timeline "$work/g" --text
  expect "premise: exit 0 (rc=$rc)" [ "$rc" = 0 ]
  expect "the other communicator is named, with --comm" \
    grep -qE "^other communicators \(--comm picks one\): comm [0-9a-f]{8} \(init0" "$work/g.out"
  ;;

# F23: analyze/check on a directory without a trace file say why there may be none, and doctor.
f23_no_trace_file_hint)
  "$ls_bin" run -o "$work/n" -- true >/dev/null 2>&1
  for cmd in analyze check; do
    run $cmd $cmd "$work/n"
    expect "$cmd: exit 2 (rc=$rc)" [ "$rc" = 2 ]
    expect "$cmd: says why (LD_PRELOAD not inherited, static NCCL)" has $cmd "LD_PRELOAD not inherited"
    expect "$cmd: points at lockstep doctor DIR" has $cmd "lockstep doctor $work/n"
  done
  ;;

# F24: two rank conflicts, two warnings (not one per process); a Flight Recorder dump's process
# is not shown with the file name as its host and a pid FR never gave.
f24_identity_warnings_and_fr_placeholders)
  seed_broken "$work/t"
  "$ls_bin" run -o "$work/t" -- lockstep-launch -n 2 --quiet --timeout 60 -- seed_deadlock --fixed >/dev/null 2>&1
  run a analyze "$work/t"
  expect "premise: rank conflicts warned" has a "warning: rank identity"
  expect "one warning per conflict (2), not per process (4)" [ "$(grep -c 'warning: rank identity' "$work/a.out")" = 2 ]
  run o ops "$data/fr-h200/ws1-watchdog" --rank 0
  expect "premise: exit 0 (rc=$rc)" [ "$rc" = 0 ]
  expect "no 'pid 0'" hasnt o "pid 0"
  expect "no file name as a host ('nccl_trace_rank_0 pid')" hasnt o "nccl_trace_rank_0 pid"
  ;;

# F18: one style of error: a missing directory is "lockstep CMD: no such directory: X" for every
# command; import leaves no -o directory behind when it fails; shrink's unwritable -o is
# "cannot write", not a C++ exception's text.
f18_error_styles)
  for cmd in analyze check doctor replay import stacks ops timeline; do
    case $cmd in
      import) run e import "$work/nope" -o "$work/imp_$cmd" ;;
      stacks) run e stacks "$work/nope" --comm x --seq 1 ;;
      ops) run e ops "$work/nope" --rank 0 ;;
      timeline) run e timeline "$work/nope" --text ;;
      *) run e $cmd "$work/nope" ;;
    esac
    expect "$cmd: exit 2 (rc=$rc)" [ "$rc" = 2 ]
    expect "$cmd: 'lockstep $cmd: no such directory: $work/nope'" has e "lockstep $cmd: no such directory: $work/nope"
  done
  expect "import created no -o directory" [ ! -e "$work/imp_import" ]
  mkdir "$work/empty"
  run e import "$work/empty" -o "$work/imp2"
  expect "import of a directory without dumps: exit 2 (rc=$rc)" [ "$rc" = 2 ]
  expect "import created no -o directory" [ ! -e "$work/imp2" ]
  seed_broken "$work/t"
  run s shrink "$work/t" -o /proc/x --no-replay -q
  expect "shrink to an unwritable -o: exit 2 (rc=$rc)" [ "$rc" = 2 ]
  expect "shrink: 'lockstep shrink: cannot write /proc/x'" has s "lockstep shrink: cannot write /proc/x"
  expect "shrink: no C++ exception text" hasnt s "filesystem error"
  ;;

# F22: grammar: one rank is "rank 0" in JUnit, one communicator is "1 communicator" in the
# reproducer's README, one missing rank "has" no trace file.
f22_grammar)
  seed_broken "$work/t"
  run a analyze "$work/t" --junit "$work/j.xml"
  expect "premise: exit 1 (rc=$rc)" [ "$rc" = 1 ]
  expect "JUnit: 'rank 0:' for one rank, no 'ranks 0:'" bash -c "grep -q 'rank 0: blocked' '$work/j.xml' && ! grep -q 'ranks 0:' '$work/j.xml'"
  run s shrink "$work/t" -o "$work/r" --no-replay -q
  expect "premise: shrink exit 0 (rc=$rc)" [ "$rc" = 0 ]
  expect "README: no '1 communicators'" bash -c "grep -q '1 communicator' '$work/r/README.md' && ! grep -q '1 communicators' '$work/r/README.md'"
  rm "$(rank_file "$work/t" 1)"
  run m replay --model "$work/t"
  expect "premise: exit 4 (rc=$rc)" [ "$rc" = 4 ]
  expect "model check: '2 ranks, 1 traced'" has m "has 2 ranks, 1 traced: no usable file of comm rank 1"
  ;;

*) echo "unknown case $case_name"; exit 2 ;;
esac
echo "$fails failure(s)"
[ "$fails" = 0 ]
