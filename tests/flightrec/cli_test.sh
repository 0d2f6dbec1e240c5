#!/usr/bin/env bash
# lockstep on directories of Flight Recorder dumps: the real H200 dumps, an import round trip,
# synthetic multi-rank dumps (divergence, missing rank, hostile pickle).
#   cli_test.sh LOCKSTEP DATA_DIR MAKE_DUMPS_PY
set -uo pipefail
ls_bin=$1 data=$2 make=$3
scen=$(dirname "$make")/make_scenarios.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
check() {  # check NAME CONDITION-RESULT
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
run() {  # run OUTFILE ARGS... ; sets rc
  "$ls_bin" "${@:2}" >"$work/$1.out" 2>"$work/$1.err"
  rc=$?
}
has() { grep -q -- "$2" "$work/$1.out" "$work/$1.err"; echo $?; }

# Real dumps, every op completed: clean on what it has, with the FR caveat.
for v in ws1-completed ws1-completed-json; do
  run "$v" analyze "$data/$v"
  check "$v: analyze exits 0 (rc=$rc)" $([ $rc = 0 ] && echo 0 || echo 1)
  check "$v: caveat names FR" $(has "$v" "Flight Recorder")
  run "$v-j" analyze --json "$data/$v"
  check "$v: communicators default_pg and tp" $(python3 -c "
import json,sys; j=json.load(open('$work/$v-j.out'))
sys.exit(0 if sorted(c['role'] for c in j['comms'])==['default_pg','tp'] and j['clean'] else 1)"; echo $?)
done

# Watchdog and in-flight dumps: ops in flight named, with the Python frame of the stuck op.
run wdjson analyze --json "$data/ws1-watchdog"
check "ws1-watchdog: blocked in all_reduce seq 2, 4 ops in flight" $(python3 -c "
import json,sys; j=json.load(open('$work/wdjson.out'))
r=j['hang']['ranks'][0]; g=j['hang']['groups'][0]['summary']
ok = r['status']=='blocked' and r['in_flight']==4 and r['blocked'][0]['op']=='all_reduce' and r['blocked'][0]['seq']==2
ok = ok and 'blocked in all_reduce on comm 29d94125 (default_pg) seq 2' in g and r['last_completed']['seq']==1
sys.exit(0 if ok else 1)"; echo $?)
run st stacks "$data/ws1-watchdog" --comm default_pg --seq 5
check "stacks --comm default_pg --seq 5: reduce_scatter (rc=$rc)" $(has st "reduce_scatter")
check "stacks: Python frame of the stuck reduce_scatter" $(has st "fr_dump.py:31")
run ops ops "$data/ws1-watchdog" --rank 0
check "ops --rank 0 lists reduce_scatter (rc=$rc)" $(has ops "reduce_scatter")
run tl timeline "$data/ws1-inflight" --text --comm default_pg
check "timeline --text --comm default_pg (rc=$rc)" $([ $rc = 0 ] && echo 0 || echo 1)

# Import round trip: the imported trace gives the same verdict and report.
for v in ws1-completed ws1-watchdog ws1-inflight-json; do
  run "imp-$v" import "$data/$v" -o "$work/imported-$v"
  check "import $v (rc=$rc)" $([ $rc = 0 ] && ls "$work/imported-$v"/*.lockstep.sqlite >/dev/null && echo 0 || echo 1)
  run "a1-$v" analyze --json "$data/$v"; r1=$rc
  run "a2-$v" analyze --json "$work/imported-$v"; r2=$rc
  check "import $v: same exit code ($r1 vs $r2)" $([ $r1 = $r2 ] && echo 0 || echo 1)
  same=$(python3 -c "
import json,sys
a=json.load(open('$work/a1-$v.out')); b=json.load(open('$work/a2-$v.out'))
for j in (a,b):
    j.pop('dir',None)
    for p in j['processes']: p.pop('file',None)
sys.exit(0 if a==b else 1)"; echo $?)
  check "import $v: same report" $same
done

# Three ranks: rank 1 issues all_to_all where ranks 0 and 2 issue reduce_scatter at seq 3.
python3 "$make" "$work/div" --ranks 3 --diverge-rank 1 --diverge-seq 3
run div analyze "$work/div"
check "divergence: exit 1 (rc=$rc)" $([ $rc = 1 ] && echo 0 || echo 1)
check "divergence: all_to_all named" $(has div "all_to_all")
check "divergence: reduce_scatter named" $(has div "reduce_scatter")
run divj analyze --json "$work/div"
check "divergence: op_type at seq 3, odd rank 1" $(python3 -c "
import json,sys; j=json.load(open('$work/divj.out')); d=j['first_divergence']
sys.exit(0 if d and d['kind']=='op_type' and d['seq']==3 and d['odd_ranks']==[1] else 1)"; echo $?)
run divs stacks "$work/div" --comm default_pg --seq 3
check "divergence: stacks show the caller" $(has divs "fsdp_reduce")

run divm replay --model "$work/div"
check "divergence: replay --model finds the deadlock (rc=$rc)" $([ $rc = 1 ] && [ "$(has divm deadlock)" = 0 ] && echo 0 || echo 1)

# Two ranks, completed, with send/recv: clean; JSON variant too.
python3 "$make" "$work/ok2" --ranks 2
run ok2 analyze "$work/ok2"
check "2 ranks with p2p: clean (rc=$rc)" $([ $rc = 0 ] && echo 0 || echo 1)
run ok2c check "$work/ok2"
check "2 ranks: check exits 0 (rc=$rc)" $([ $rc = 0 ] && echo 0 || echo 1)
# FR records no stream: a send and the receive after it must not be modelled as one stream's
# order (each rank sends, then receives: NCCL completes both), so the model finds no deadlock.
run ok2m replay --model "$work/ok2"
check "2 ranks with p2p: replay --model finds no deadlock (rc=$rc)" $([ $rc = 0 ] && [ "$(has ok2m deadlock)" = 1 ] && echo 0 || echo 1)
python3 "$make" "$work/ok2j" --ranks 2 --json
run ok2j analyze "$work/ok2j"
check "2 ranks JSON: clean (rc=$rc)" $([ $rc = 0 ] && echo 0 || echo 1)

# The incomplete-evidence contract (exit 4, never "clean") is the analyzer's: enforced here once
# the analyzer implements it (its --help lists exit code 4).
incomplete_contract=$("$ls_bin" --help 2>&1 | grep -qiE '^ *4 .*incomplete' && echo 1 || echo 0)

# A missing rank's dump: the communicator still has 3 ranks, 2 of them read.
python3 "$make" "$work/miss" --ranks 3 --drop-rank 2
run missj analyze --json "$work/miss"
check "missing rank: default_pg has nranks 3, 2 members" $(python3 -c "
import json,sys; j=json.load(open('$work/missj.out')); c=[c for c in j['comms'] if c['role']=='default_pg'][0]
sys.exit(0 if c['nranks']==3 and len(c['members'])==2 else 1)"; echo $?)
if [ "$incomplete_contract" = 1 ]; then
  check "missing rank: exit 4 (rc=$rc)" $([ $rc = 4 ] && echo 0 || echo 1)
fi

# A ring that lost its oldest entry (rank 1's size mismatch at seq 1): the dump says
# fr_history_dropped, and no command calls the job clean (exit 4, named in text and JSON).
python3 "$make" "$work/lost" --ranks 2 --lose-oldest-rank 1
for cmd in analyze check "replay --model"; do
  name=lost-${cmd// /-}
  run "$name" $cmd "$work/lost"
  check "lost ring: $cmd exits 4 (rc=$rc)" $([ $rc = 4 ] && echo 0 || echo 1)
  check "lost ring: $cmd names the lost entries" $(has "$name" "Flight Recorder dump lost entries")
done
run lostj analyze --json "$work/lost"
check "lost ring: JSON names fr_history_dropped, not clean" $(python3 -c "
import json,sys; j=json.load(open('$work/lostj.out'))
sys.exit(0 if not j['clean'] and any(e['kind']=='fr_history_dropped' for e in j['evidence']) else 1)"; echo $?)

# Windows, gaps and fields that leave evidence unknown (make_scenarios.py): never a divergence
# or clean, but incomplete (exit 4) with the unknown named, in analyze (text, JSON) and check;
# replay --model claims no deadlock on them.
for sc in p2p_window coalesced_cut lost_collective record_gap seq_gap dump_times no_seq unknown_dtype ok_window; do
  python3 "$scen" "$work/sc-$sc" $sc
  run "sc-$sc" analyze "$work/sc-$sc"
  check "$sc: analyze exits 4 (rc=$rc)" $([ $rc = 4 ] && echo 0 || echo 1)
  run "sc-$sc-j" analyze --json "$work/sc-$sc"
  check "$sc: JSON: no divergence, not clean, evidence named (rc=$rc)" $(python3 -c "
import json,sys; j=json.load(open('$work/sc-$sc-j.out'))
sys.exit(0 if j['first_divergence'] is None and not j['clean'] and j['evidence'] else 1)"; echo $?)
  run "sc-$sc-c" check "$work/sc-$sc"
  check "$sc: check exits 4 (rc=$rc)" $([ $rc = 4 ] && echo 0 || echo 1)
  run "sc-$sc-m" replay --model "$work/sc-$sc"
  check "$sc: replay --model claims no deadlock (rc=$rc)" $([ $rc = 4 ] && [ "$(has "sc-$sc-m" "model check: deadlock")" = 1 ] && echo 0 || echo 1)
done
# What both windows hold is still compared: a divergence there is claimed (exit 1).
python3 "$scen" "$work/sc-p2pd" p2p_window_diverge
run sc-p2pd analyze --json "$work/sc-p2pd"
check "p2p_window_diverge: exit 1 on message 5's count (rc=$rc)" $([ $rc = 1 ] && python3 -c "
import json,sys; d=json.load(open('$work/sc-p2pd.out'))['first_divergence']
sys.exit(0 if d and d['kind']=='p2p_count' and '80 vs recv count 81' in d['detail'] else 1)" && echo 0 || echo 1)
python3 "$scen" "$work/sc-gapd" gap_after_divergence
run sc-gapd analyze --json "$work/sc-gapd"
check "gap_after_divergence: exit 1 at seq 2 (rc=$rc)" $([ $rc = 1 ] && python3 -c "
import json,sys; d=json.load(open('$work/sc-gapd.out'))['first_divergence']
sys.exit(0 if d and d['kind']=='op_type' and d['seq']==2 else 1)" && echo 0 || echo 1)
# Specific evidence: the seq a hole starts at, per scenario.
check "seq_gap: rank 1 whole through seq 3" $(python3 -c "
import json,sys; j=json.load(open('$work/sc-seq_gap-j.out'))
sys.exit(0 if any(e['kind']=='evidence_gap' and e.get('from_seq')==4 and e['ranks']==[1] for e in j['evidence']) else 1)"; echo $?)
check "dump_times: rank 1 whole through seq 4" $(python3 -c "
import json,sys; j=json.load(open('$work/sc-dump_times-j.out'))
sys.exit(0 if any(e['kind']=='evidence_gap' and e.get('from_seq')==5 and e['ranks']==[1] for e in j['evidence']) else 1)"; echo $?)

# import skips an unreadable dump: the imported trace still names it (analyze says incomplete).
# (Two ranks read whole, and a third file that is a dump no reader can read: the only evidence
# missing is that file.)
python3 "$make" "$work/impbad" --ranks 2
printf '\x80\x04unreadable' >"$work/impbad/nccl_trace_rank_2"
run impbad import "$work/impbad" -o "$work/impbad-out"
run impbad-a analyze --json "$work/impbad-out"
check "import with an unreadable dump: analyze OUT exits 4 (rc=$rc)" $([ $rc = 4 ] && echo 0 || echo 1)
check "import with an unreadable dump: analyze OUT names it" $(has impbad-a "nccl_trace_rank_2")
run impbad-d analyze --json "$work/impbad"; r1=$rc
check "import with an unreadable dump: same exit code as analyze DIR ($r1 vs $rc)" $([ $r1 = 4 ] && echo 0 || echo 1)

# A dump over the reader's size limit (sparse, 1 GiB + 1 byte): named as skipped, never read.
mkdir -p "$work/big" && python3 "$make" "$work/big" --ranks 2
printf '\x80\x02' >"$work/big/nccl_trace_rank_1" && truncate -s $((1024 * 1024 * 1024 + 1)) "$work/big/nccl_trace_rank_1"
run big analyze "$work/big"
check "oversized dump: exit 4 (rc=$rc)" $([ $rc = 4 ] && echo 0 || echo 1)
check "oversized dump: named as skipped" $(has big "nccl_trace_rank_1.*over the reader's limit")

# A hostile pickle (os.system via REDUCE) in place of rank 2: refused, named, never executed.
rm -f /tmp/lockstep-fr-pwned
python3 "$make" "$work/evil" --ranks 3 --hostile-rank 2
run evil analyze "$work/evil"
check "hostile pickle: skipped with reason" $(has evil "not allowed")
check "hostile pickle: refused by name" $(has evil "opcode GLOBAL")
if [ "$incomplete_contract" = 1 ]; then
  check "hostile pickle: exit 4 (rc=$rc)" $([ $rc = 4 ] && echo 0 || echo 1)
fi
check "hostile pickle: nothing executed" $([ ! -e /tmp/lockstep-fr-pwned ] && echo 0 || echo 1)

# Dump file names with terminal escapes (ESC, BEL): every command prints them escaped.
mkdir -p "$work/esc"
python3 "$make" "$work/escsrc" --ranks 2
cp "$work/escsrc/nccl_trace_rank_0" "$work/esc/$(printf '\033]0;pwned\007')nccl_trace_rank_0"
printf '\x80\x04unreadable' >"$work/esc/$(printf '\033[2J')nccl_trace_rank_1"
run esc-import import "$work/esc" -o "$work/esco"
run esc-analyze analyze "$work/esc"
run esc-check check "$work/esc"
run esc-model replay "$work/esc" --model
run esc-ops ops "$work/esc" --rank 0
for name in esc-import esc-analyze esc-check esc-model esc-ops; do
  check "escaped names: $name prints no ESC or BEL" $(grep -q $'[\033\007]' "$work/$name.out" "$work/$name.err" && echo 1 || echo 0)
done

# A directory of only non-dump files: input error, not a crash.
mkdir -p "$work/none" && echo '{"schema": "lockstep.analysis"}' >"$work/none/report.json"
run none analyze "$work/none"
check "no dumps: exit 2 (rc=$rc)" $([ $rc = 2 ] && echo 0 || echo 1)

if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed; outputs:"
  for f in "$work"/*.out "$work"/*.err; do echo "== $f"; head -40 "$f"; done
  exit 1
fi
