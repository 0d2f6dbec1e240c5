#!/usr/bin/env bash
# --summary-first (the default above 1 GiB of traces) against --full-read (issue 33): the verdict
# JSON must be the same on every trace directory the tests have -- tests/data and gen_trace
# directories with and without a divergence, a lagging host, and a divergence early enough that
# the checkpoints disagree -- except for what summary_vs_full.py allows: how it was read
# ("reading"), the per-communicator windows, and, where it cut anything, its one evidence item
# that the order across communicators before the cut was not read (a clean full read is
# incomplete here, exit 4). Where a cut is possible it must have been made (ops_not_read > 0), so
# the comparison is not vacuous. The files are read in parallel: one thread (--threads 1) and
# the default must give the same report, byte for byte. Without a flag, a directory this small is
# read whole.
#   summary_first_test.sh LOCKSTEP GEN_TRACE DATA_DIR
set -euo pipefail
LOCKSTEP=$1 GEN=$2 DATA=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
here=$(cd "$(dirname "$0")" && pwd)

compare() {  # DIR EXPECT_CUT(0|1) [report]
  local dir=$1 expect_cut=$2 rc_s=0 rc_f=0 rc_d=0
  "$LOCKSTEP" analyze "$dir" --json --summary-first >"$work/s.json" 2>/dev/null || rc_s=$?
  "$LOCKSTEP" analyze "$dir" --json --full-read >"$work/f.json" 2>/dev/null || rc_f=$?
  # Without a flag, a directory under 1 GiB is read whole: the full read's report, byte for byte.
  "$LOCKSTEP" analyze "$dir" --json >"$work/d.json" 2>/dev/null || rc_d=$?
  if [ "$rc_d" != "$rc_f" ] || ! cmp -s "$work/d.json" "$work/f.json"; then
    echo "FAIL $dir: the default read of a small directory is not the full read"; fail=1; return
  fi
  local rc_1=0 rc_1f=0
  "$LOCKSTEP" analyze "$dir" --json --summary-first --threads 1 >"$work/s1.json" 2>/dev/null || rc_1=$?
  "$LOCKSTEP" analyze "$dir" --json --full-read --threads 3 >"$work/f3.json" 2>/dev/null || rc_1f=$?
  if [ "$rc_1" != "$rc_s" ] || ! cmp -s "$work/s1.json" "$work/s.json" || [ "$rc_1f" != "$rc_f" ] ||
     ! cmp -s "$work/f3.json" "$work/f.json"; then
    echo "FAIL $dir: the report depends on the number of reading threads"; fail=1; return
  fi
  if [ ! -s "$work/f.json" ]; then
    [ "$rc_s" = "$rc_f" ] || { echo "FAIL $dir: exit $rc_s (summary first) vs $rc_f (full read), no report"; fail=1; }
    echo "skip $dir: no report (exit $rc_f)"; return
  fi
  if ! python3 - "$work/s.json" "$work/f.json" "$expect_cut" "$dir" "$rc_s" "$rc_f" "$here" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[7])
import summary_vs_full
s, f = (json.load(open(p)) for p in sys.argv[1:3])
expect_cut, name = sys.argv[3] == "1", sys.argv[4]
cut = summary_vs_full.check(s, f, name, int(sys.argv[5]), int(sys.argv[6]))
if expect_cut and cut == 0:
    sys.exit(f"{name}: summary first read everything (no cut made)")
print(f"ok {name}: {cut} ops not read")
PY
  then fail=1; fi
  [ "${3:-}" = report ] || return 0
  # report and check read summary first too: the same page data (but "reading") and exit code.
  local rc_cs=0 rc_cf=0
  "$LOCKSTEP" check "$dir" --summary-first >/dev/null 2>&1 || rc_cs=$?
  "$LOCKSTEP" check "$dir" --full-read >/dev/null 2>&1 || rc_cf=$?
  local want=$rc_cf
  [ "$rc_cf" = 0 ] && [ "$rc_s" = 4 ] && [ "$rc_f" = 0 ] && want=4
  [ "$rc_cs" = "$want" ] || { echo "FAIL $dir: check exit $rc_cs (summary first) vs $rc_cf (full read), expected $want"; fail=1; }
  "$LOCKSTEP" report "$dir" -o "$work/page.html" --summary-first 2>/dev/null && cp "$work/page.html" "$work/s.html"
  "$LOCKSTEP" report "$dir" -o "$work/page.html" --full-read 2>/dev/null && cp "$work/page.html" "$work/f.html"
  if ! python3 - "$work/s.html" "$work/f.html" "$expect_cut" "$dir" "$here" <<'PY'
import json, re, sys
sys.path.insert(0, sys.argv[5])
import summary_vs_full
def data(p):
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', open(p).read(), re.S)
    return json.loads(m.group(1))
s, f = data(sys.argv[1]), data(sys.argv[2])
if sys.argv[3] == "1" and not s["reading"]["text"]:
    sys.exit(f"{sys.argv[4]}: the report does not say what was not read")
summary_vs_full.check(s, f, sys.argv[4] + " (report page data)")
PY
  then fail=1; fi
}

# stacks on a communicator of every rank reads summary first when seq N lies after every member's
# cut: the same listing as --full-read but its "read:" line, which must be there when expected.
compare_stacks() {  # DIR COMM SEQ EXPECT_CUT(0|1)
  local dir=$1 comm=$2 seq=$3 expect_cut=$4 rc_s=0 rc_f=0
  "$LOCKSTEP" stacks "$dir" --comm "$comm" --seq "$seq" >"$work/st-s.txt" 2>&1 || rc_s=$?
  "$LOCKSTEP" stacks "$dir" --comm "$comm" --seq "$seq" --full-read >"$work/st-f.txt" 2>&1 || rc_f=$?
  local cut=0
  grep -q '^  read: summary first:' "$work/st-s.txt" && cut=1
  if [ "$rc_s" != "$rc_f" ] || ! diff <(grep -v '^  read: summary first:' "$work/st-s.txt") "$work/st-f.txt" >/dev/null ||
     [ "$cut" != "$expect_cut" ] || grep -q '^  read:' "$work/st-f.txt"; then
    echo "FAIL stacks $dir --comm $comm --seq $seq: exit $rc_s vs $rc_f (full read), cut $cut (expected $expect_cut)"
    diff "$work/st-s.txt" "$work/st-f.txt" | head -20
    fail=1
    return
  fi
  if [ "$cut" = 1 ] && [ "$seq" -le 1024 ] && ! grep -q "^  read: summary first: .* not read but for seq $seq, found in " "$work/st-s.txt"; then
    echo "FAIL stacks $dir --comm $comm --seq $seq: the seq before the cut not said to be looked up"
    cat "$work/st-s.txt" | tail -3
    fail=1
    return
  fi
  echo "ok stacks $dir $comm $seq (cut $cut)"
}

# gen_trace: world, tp and dp communicators; checkpoints every 1,024 collectives (9,000 ops:
# the world communicator's one checkpoint at its 1,024th all-to-all).
"$GEN" "$work/diverge" --ranks 16 --ops 9000 --rank-names >/dev/null
"$GEN" "$work/clean" --ranks 16 --ops 9000 --diverge-from-end 0 --rank-names >/dev/null
"$GEN" "$work/lag" --ranks 16 --ops 9000 --diverge-from-end 0 --lag-host-ops 16 --rank-names >/dev/null
"$GEN" "$work/early" --ranks 16 --ops 9000 --diverge-from-end 4000 --rank-names >/dev/null
"$GEN" "$work/small" --ranks 8 --ops 600 --rank-names >/dev/null
# Nothing completed anywhere (a job hung at its first collectives: 40 ops, all in flight).
"$GEN" "$work/nocompl" --ranks 16 --ops 40 --rank-names >/dev/null
# 3,000 ops: the tensor-parallel communicators pass a checkpoint, the world and data-parallel
# ones do not (read whole while the others are cut).
"$GEN" "$work/partial" --ranks 16 --ops 3000 --rank-names >/dev/null
# A rank's file missing, and one corrupt (pages overwritten near its start): skipped, named, and the
# verdict the full read's.
cp -r "$work/diverge" "$work/missing" && rm "$work/missing/rank-5.lockstep.sqlite"
cp -r "$work/diverge" "$work/corrupt"
dd if=/dev/urandom of="$work/corrupt/rank-9.lockstep.sqlite" bs=4096 seek=3 count=8 conv=notrunc status=none
for d in diverge clean lag partial missing corrupt; do compare "$work/$d" 1 report; done
# The world communicator (1,125 all-to-alls at 9,000 ops, one checkpoint at 1,024): a seq before the
# cut is looked up in each member's file (bisection on call_index); after it, summary first; beyond
# the last, "no op" with the count issued (the collectives not read included); a lagging host's
# members, a missing and a corrupt file.
for d in diverge lag missing corrupt; do
  compare_stacks "$work/$d" init0 1 1
  compare_stacks "$work/$d" init0 1000 1
  compare_stacks "$work/$d" init0 1024 1
  compare_stacks "$work/$d" init0 1100 1
  compare_stacks "$work/$d" init0 1124 1
  compare_stacks "$work/$d" init0 1200 1
done
# A file whose world seqs before the cut do not grow (rank 3's 400th and 600th swapped): the
# lookup of those seqs fails and every row of the members is read (no "read:" line, the full
# read's listing); another seq is still looked up.
cp -r "$work/diverge" "$work/swapped"
python3 - "$work/swapped/rank-3.lockstep.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
world = "sig IN (SELECT id FROM signatures WHERE comm_id = (SELECT min(id) FROM comms))"
n = db.execute(f"UPDATE op_rows SET seq = CASE seq WHEN 600 THEN 400 ELSE 600 END WHERE seq IN (400, 600) AND {world}").rowcount
db.commit()
sys.exit(0 if n == 2 else "swapped: %d rows changed" % n)
PY
compare_stacks "$work/swapped" init0 400 0
compare_stacks "$work/swapped" init0 600 0
compare_stacks "$work/swapped" init0 500 1
# More members than one batch of files (1,024) read every row of (--full-read): a lagging host,
# a missing and an unreadable file; the summary-first read of the directory (no checkpoint at
# 16 ops: nothing cut) must give the same listing.
"$GEN" "$work/wide" --ranks 1032 --ops 16 --ranks-per-host 8 --lag-host-ops 4 --diverge-from-end 0 --threads 2 >/dev/null
rm "$work/wide/node3-10026.lockstep.sqlite"
echo garbage >"$work/wide/node100-10800.lockstep.sqlite"
compare_stacks "$work/wide" init0 3 0
compare_stacks "$work/wide" init0.split1 3 0
# check --write-baseline of traces over 1 GiB reads the canonical schedule 256 MiB of files at a
# time: the baseline of the full read byte for byte (tests/analyzer/baseline_test.cpp across
# batches). Here, under 1 GiB: one read, every row; the same baseline.
# passing: 16 ranks, whose all-to-alls gen_trace gives per-peer splits; passing24: 24 ranks,
# whose all-to-alls have none (one count, which the file's signatures prove).
"$GEN" "$work/passing" --ranks 16 --ops 9000 --diverge-from-end 0 --finished --rank-names >/dev/null
"$GEN" "$work/passing24" --ranks 24 --ops 9000 --diverge-from-end 0 --finished --rank-names >/dev/null
"$GEN" "$work/passing-wide" --ranks 1032 --ops 16 --ranks-per-host 8 --diverge-from-end 0 --finished --threads 2 >/dev/null
compare "$work/passing24" 1
for d in passing passing24 passing-wide; do
  rc_s=0 rc_f=0
  "$LOCKSTEP" check "$work/$d" --write-baseline "$work/base-s.txt" >"$work/check-s.txt" 2>&1 || rc_s=$?
  "$LOCKSTEP" check "$work/$d" --full-read --write-baseline "$work/base-f.txt" >/dev/null 2>&1 || rc_f=$?
  if [ "$rc_s" != 0 ] || [ "$rc_f" != 0 ] || ! cmp -s "$work/base-s.txt" "$work/base-f.txt" ||
     ! grep -q '^order ranks' "$work/base-s.txt"; then
    echo "FAIL check --write-baseline $d: exit $rc_s vs $rc_f (full read), or baselines that differ"
    tail -3 "$work/check-s.txt"; diff "$work/base-s.txt" "$work/base-f.txt" | head -10
    fail=1
  else
    echo "ok check --write-baseline $d ($(wc -l <"$work/base-s.txt") lines)"
  fi
  "$LOCKSTEP" check "$work/$d" --baseline "$work/base-f.txt" >/dev/null 2>&1 || { echo "FAIL check --baseline $d: its own baseline"; fail=1; }
  # Summary first (what traces over 1 GiB get): gen_trace writes order digests, as the recorder
  # does, so the order before the cuts is proven. Where the all-to-alls are proven too (passing24)
  # the verdict is the full read's: clean, its baseline matched and written, the full read's byte
  # for byte. Where their per-peer splits were not read (passing), it stays incomplete (exit 4):
  # a baseline, which keeps only that an all-to-all was uneven, does not prove them.
  rc_b=0 rc_w=0
  "$LOCKSTEP" check "$work/$d" --summary-first --baseline "$work/base-f.txt" >"$work/check-b.txt" 2>&1 || rc_b=$?
  "$LOCKSTEP" check "$work/$d" --summary-first --write-baseline "$work/base-w.txt" >"$work/check-w.txt" 2>&1 || rc_w=$?
  if ! grep -q '^read: summary first' "$work/check-b.txt"; then
    [ "$d" = passing-wide ] || { echo "FAIL check --summary-first $d: nothing cut"; fail=1; }
  elif ! grep -q "their order across communicators by order digest" "$work/check-b.txt"; then
    echo "FAIL check --summary-first $d: the order not proven by order digest"; tail -3 "$work/check-b.txt"; fail=1
  elif [ "$d" = passing24 ]; then
    if [ "$rc_b" != 0 ] || [ "$rc_w" != 0 ] || ! cmp -s "$work/base-w.txt" "$work/base-f.txt"; then
      echo "FAIL check --summary-first $d: with its baseline exit $rc_b (want 0), --write-baseline exit $rc_w (want 0, the full read's)"
      cat "$work/check-b.txt" "$work/check-w.txt" | tail -6; fail=1
    else
      echo "ok check --summary-first $d: the order proven by order digest, the baseline matched and written"
    fi
  elif [ "$rc_b" != 4 ] || ! grep -q "all-to-alls have per-peer splits" "$work/check-b.txt" || [ "$rc_w" != 4 ] || [ -e "$work/base-w.txt" ]; then
    echo "FAIL check --summary-first $d: with its baseline exit $rc_b (want 4, the splits not read), --write-baseline exit $rc_w (want 4, no file)"
    cat "$work/check-b.txt" "$work/check-w.txt" | tail -6; fail=1
  else
    echo "ok check --summary-first $d: the all-to-alls' splits not read, named, no baseline written"
  fi
  rm -f "$work/base-w.txt"
  cp "$work/base-f.txt" "$work/base-$d.txt"
done
# Without order digests (files of an older lockstep: the columns NULL), summary first cannot prove
# the order: the canonical schedule, every rank's order of every collective, equal to the
# baseline proves it (exit 0); without a baseline that order is not checked, so no baseline is
# written from it (exit 4).
cp -r "$work/passing24" "$work/no-order"
for f in "$work/no-order"/*.sqlite; do
  python3 -c 'import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); db.execute("UPDATE checkpoints SET order_count=NULL, order_digest=NULL"); db.commit()' "$f"
done
rc_b=0 rc_w=0 rc_a=0
"$LOCKSTEP" check "$work/no-order" --summary-first --baseline "$work/base-passing24.txt" >"$work/check-b.txt" 2>&1 || rc_b=$?
"$LOCKSTEP" check "$work/no-order" --summary-first --write-baseline "$work/base-w.txt" >"$work/check-w.txt" 2>&1 || rc_w=$?
"$LOCKSTEP" analyze "$work/no-order" --summary-first --json >"$work/no-order.json" 2>/dev/null || rc_a=$?
if [ "$rc_b" != 0 ] || ! grep -q "and is the baseline's" "$work/check-b.txt" || [ "$rc_w" != 4 ] || [ -e "$work/base-w.txt" ] ||
   [ "$rc_a" != 4 ] || ! python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["reading"]["order_proven"] is False and any(e["kind"]=="order_not_read" and "no order digest" in e["detail"] for e in j["evidence"]) else 1)' "$work/no-order.json"; then
  echo "FAIL no-order: with its baseline exit $rc_b (want 0), --write-baseline exit $rc_w (want 4, no file), analyze exit $rc_a (want 4, order_not_read)"
  cat "$work/check-b.txt" "$work/check-w.txt" | tail -6; fail=1
else
  echo "ok no-order: the order proven by the baseline, none written without one"
fi
rm -f "$work/base-w.txt"
# Two communicators named alike (one commName: one family in the canonical schedule): a rank that
# issues two of their collectives the other way round matches a clean run's baseline, so the
# baseline cannot prove the order the order digests did not (exit 4, never 0; the full read
# finds the inversion, exit 1).
"$GEN" "$work/named-ok" --ranks 24 --ops 9000 --diverge-from-end 0 --finished --rank-names >/dev/null
"$GEN" "$work/named-inv" --ranks 24 --ops 9000 --diverge-from-end 0 --finished --rank-names --invert-rank 5 --invert-at 7 >/dev/null
for f in "$work/named-ok"/*.sqlite "$work/named-inv"/*.sqlite; do
  python3 -c 'import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); db.execute("UPDATE comms SET name=\x27x\x27 WHERE id IN (1,2)"); db.commit()' "$f"
done
rc_w=0 rc_b=0 rc_f=0
"$LOCKSTEP" check "$work/named-ok" --full-read --write-baseline "$work/base-named.txt" >"$work/check-w.txt" 2>&1 || rc_w=$?
"$LOCKSTEP" check "$work/named-inv" --summary-first --baseline "$work/base-named.txt" >"$work/check-b.txt" 2>&1 || rc_b=$?
"$LOCKSTEP" check "$work/named-inv" --full-read >/dev/null 2>&1 || rc_f=$?
if [ "$rc_w" != 0 ] || [ "$rc_b" != 4 ] || [ "$rc_f" != 1 ] || grep -q "and is the baseline's" "$work/check-b.txt"; then
  echo "FAIL named alike: baseline written exit $rc_w (want 0), summary first with it exit $rc_b (want 4), full read exit $rc_f (want 1)"
  cat "$work/check-w.txt" "$work/check-b.txt" | tail -8; fail=1
else
  echo "ok named alike: a baseline does not prove the order of two communicators of one family"
fi
# The canonical schedule summary first reads a few files the digests prove alike: it must be the
# full read's byte for byte where (a) every communicator's collectives are all-to-alls, whose
# digest (op, dtype) is the same on every communicator and whose count is not, so a
# communicator's history before its cut comes from a communicator of its own all-to-all; and
# (b) one-member communicators (tp 32 of 32 ranks) are cut past where the order chain ended
# (order digests NULL after the 12,000th collective, as a writer leaves them once a chain
# ends), which prove_unread does not ask of them: then every row is read.
"$GEN" "$work/a2a" --ranks 32 --ops 10000 --tp 4 --diverge-from-end 0 --finished --all-to-all-everywhere >/dev/null
"$GEN" "$work/single" --ranks 32 --ops 13000 --tp 32 --diverge-from-end 0 --finished >/dev/null
for f in "$work/single"/*.sqlite; do
  python3 -c 'import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); db.execute("UPDATE checkpoints SET order_count=NULL, order_digest=NULL WHERE order_count > 12000"); db.commit()' "$f"
done
for d in a2a single; do
  rc_f=0 rc_s=0 rc_b=0
  "$LOCKSTEP" check "$work/$d" --full-read --write-baseline "$work/base-f.txt" >/dev/null 2>&1 || rc_f=$?
  "$LOCKSTEP" check "$work/$d" --summary-first --write-baseline "$work/base-s.txt" >"$work/check-s.txt" 2>&1 || rc_s=$?
  "$LOCKSTEP" check "$work/$d" --summary-first --baseline "$work/base-f.txt" >/dev/null 2>&1 || rc_b=$?
  if [ "$rc_f" != 0 ] || [ "$rc_s" != 0 ] || [ "$rc_b" != 0 ] || ! cmp -s "$work/base-s.txt" "$work/base-f.txt" ||
     ! grep -q '^read: summary first' "$work/check-s.txt"; then
    echo "FAIL canonical schedule summary first $d: exit $rc_s (full read $rc_f), --baseline exit $rc_b, or baselines that differ"
    diff "$work/base-s.txt" "$work/base-f.txt" | head -6; fail=1
  else
    echo "ok canonical schedule summary first $d: the full read's"
  fi
  rm -f "$work/base-s.txt" "$work/base-f.txt"
done
# An order inversion before the cut: rank 3 issues the world all-to-all #51 after the next step's
# first tensor-parallel all_gather (ops 407 and 408; each communicator's own sequence, so every
# checkpoint digest, unchanged; its order digests as issued). The full read, and the default for
# a directory this small, names it (exit 1); summary first must not say clean: rank 3's order
# digests differ from its group's, so the order it did not read is evidence (order_not_read, exit 4).
"$GEN" "$work/inverted" --ranks 16 --ops 9000 --diverge-from-end 0 --finished --rank-names --invert-rank 3 --invert-at 407 >/dev/null
rc_d=0 rc_s=0
"$LOCKSTEP" analyze "$work/inverted" >"$work/inv-d.txt" 2>&1 || rc_d=$?
"$LOCKSTEP" analyze "$work/inverted" --summary-first --json >"$work/inv-s.json" 2>/dev/null || rc_s=$?
if [ "$rc_d" != 1 ] || ! grep -q "FIRST DIVERGENCE: order inversion" "$work/inv-d.txt" || [ "$rc_s" != 4 ] ||
   ! python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["verdict"]=="incomplete" and any(e["kind"]=="order_not_read" and "rank 3" in e["detail"] and "different orders" in e["detail"] for e in j["evidence"]) and j["reading"]["ops_not_read"]>0 else 1)' "$work/inv-s.json"; then
  echo "FAIL inverted: default exit $rc_d (want 1, an order inversion), --summary-first exit $rc_s (want 4, order_not_read)"
  head -3 "$work/inv-d.txt"; fail=1
else
  echo "ok inverted: the full read names the inversion, summary first says the order was not read"
fi
# Ops in flight before the newest checkpoints (they never count as done): read whole.
compare "$work/early" 0
compare "$work/small" 0
compare "$work/nocompl" 0
# Every directory of tests/data that holds traces (Flight Recorder dumps included).
while IFS= read -r d; do compare "$d" 0; done < <(find "$DATA" -type d | sort)
exit $fail
