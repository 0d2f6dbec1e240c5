#!/usr/bin/env bash
# Node summaries (`lockstep summarize`, docs/scaling.md; used by a summary-first read, the default
# above 1 GiB of traces, --summary-first here) against the direct summary-first read and
# --full-read (what they may differ in: summary_vs_full.py): on gen_trace directories and every directory of tests/data, summarized with
# --every-host, the verdict JSON must be the direct summary-first read's (everything but
# "reading", which must say the summaries were used) and the full read's (but the windows, as in
# summary_first_test.sh); check's exit code and report's page data too. Then summaries that must
# not be trusted -- a file rewritten after summarizing (and one altered with its size and mtime
# kept), a covered file missing, garbage, an SQLite file, a truncated or altered summary, crafted
# summaries with a valid checksum and lying content, a FIFO, a directory, a symlink -- must each
# be ignored and named in the output, the verdict still the direct read's.
#   node_summary_test.sh LOCKSTEP GEN_TRACE DATA_DIR
set -euo pipefail
LOCKSTEP=$1 GEN=$2 DATA=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
here=$(cd "$(dirname "$0")" && pwd)

# DIR (with summaries) REF (the same traces without) EXPECT: used | ignored | any
compare() {
  local dir=$1 ref=$2 expect=$3 rc_n=0 rc_s=0 rc_f=0
  timeout 60 "$LOCKSTEP" analyze "$dir" --json --summary-first >"$work/n.json" 2>/dev/null || rc_n=$?
  # The reference's reads, once per reference directory (the hostile cases share one).
  local key
  key=$work/ref-$(printf '%s' "$ref" | md5sum | cut -c1-12)
  if [ ! -f "$key.rc" ]; then
    "$LOCKSTEP" analyze "$ref" --json --summary-first >"$key.s.json" 2>/dev/null || rc_s=$?
    "$LOCKSTEP" analyze "$ref" --json --full-read >"$key.f.json" 2>/dev/null || rc_f=$?
    echo "$rc_s $rc_f" >"$key.rc"
  fi
  read -r rc_s rc_f <"$key.rc"
  cp "$key.s.json" "$work/s.json" && cp "$key.f.json" "$work/f.json"
  if [ "$rc_n" != "$rc_s" ]; then
    echo "FAIL $dir: exit $rc_n (summaries) vs $rc_s (summary first)"; fail=1; return
  fi
  if [ ! -s "$work/s.json" ] && [ "$rc_s" != "$rc_f" ]; then
    echo "FAIL $dir: exit $rc_s (summary first) vs $rc_f (full read), no report"; fail=1; return
  fi
  [ -s "$work/s.json" ] || { echo "skip $dir: no report (exit $rc_s)"; return; }
  local rc_1=0
  if [ "$expect" != ignored ]; then
    "$LOCKSTEP" analyze "$dir" --json --summary-first --threads 1 >"$work/n1.json" 2>/dev/null || rc_1=$?
    if [ "$rc_1" != "$rc_n" ] || ! cmp -s "$work/n1.json" "$work/n.json"; then
      echo "FAIL $dir: the report from summaries depends on the number of reading threads"; fail=1; return
    fi
  fi
  if ! python3 - "$work/n.json" "$work/s.json" "$work/f.json" "$dir" "$ref" "$expect" "$rc_n" "$rc_f" "$here" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[9])
import summary_vs_full
n, s, f = (json.load(open(p)) for p in sys.argv[1:4])
name, ref, expect = sys.argv[4], sys.argv[5], sys.argv[6]
use = n["reading"].get("summaries", {})
if expect == "used" and (use.get("used", 0) == 0 or use.get("ignored")):
    sys.exit(f"{name}: summaries not used: {use}")
if expect == "ignored":
    if not use.get("ignored"):
        sys.exit(f"{name}: a summary that must be ignored was not: {use}")
    if not all(i["path"] in n["reading"]["text"] for i in use["ignored"]):
        sys.exit(f"{name}: an ignored summary is not named in the text: {n['reading']['text']!r}")
def same_dir(j):  # the reports name the directory and its files: the reference's paths
    return json.loads(json.dumps(j).replace(json.dumps(name)[1:-1], json.dumps(ref)[1:-1]))
n = same_dir(n)
rn, rs = dict(n["reading"]), dict(s["reading"])
for r in (rn, rs):
    r.pop("summaries", None), r.pop("text", None)
if rn != rs:
    sys.exit(f"{name}: what was read differs: {rn} vs {rs}")
a, b = dict(n), dict(s)
a.pop("reading"), b.pop("reading")
if a != b:
    sys.exit(f"{name}: verdict differs from the direct summary-first read: " + ", ".join(k for k in a if a.get(k) != b.get(k)))
a["reading"] = n["reading"]
summary_vs_full.check(a, f, name + " (against --full-read)", int(sys.argv[7]), int(sys.argv[8]))
print(f"ok {name}: summaries {use.get('used', 0)} used ({use.get('files', 0)} files), {len(use.get('ignored', []))} ignored" +
      "".join(f"; {os.path.basename(i['path'])}: {i['reason']}" for i in use.get("ignored", [])))
PY
  then fail=1; fi
  [ "${4:-}" = report ] || return 0
  local rc_cn=0 rc_cs=0
  "$LOCKSTEP" check "$dir" --summary-first >"$work/check.txt" 2>&1 || rc_cn=$?
  "$LOCKSTEP" check "$ref" --summary-first >/dev/null 2>&1 || rc_cs=$?
  [ "$rc_cn" = "$rc_cs" ] || { echo "FAIL $dir: check exit $rc_cn (summaries) vs $rc_cs"; fail=1; }
  if [ "$expect" = used ] && ! grep -q "node summar" "$work/check.txt"; then
    echo "FAIL $dir: check does not say it read node summaries"; fail=1
  fi
  mkdir -p "$work/n" "$work/s"  # the page names its output file: the same name for both
  "$LOCKSTEP" report "$dir" --summary-first -o "$work/n/page.html" >/dev/null 2>&1 || true
  "$LOCKSTEP" report "$ref" --summary-first -o "$work/s/page.html" >/dev/null 2>&1 || true
  if ! python3 - "$work/n/page.html" "$work/s/page.html" "$dir" "$ref" <<'PY'
import json, re, sys
def data(p):
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', open(p).read(), re.S)
    return json.loads(m.group(1))
n, s = data(sys.argv[1]), data(sys.argv[2])
n = json.loads(json.dumps(n).replace(json.dumps(sys.argv[3])[1:-1], json.dumps(sys.argv[4])[1:-1]))
n.pop("reading"), s.pop("reading")
if n != s:
    sys.exit(f"{sys.argv[3]}: report data differs: " + ", ".join(k for k in n if n.get(k) != s.get(k)))
PY
  then fail=1; fi
  # stacks takes the headers of covered files from the summaries: the same listing.
  local where
  where=$(python3 -c 'import json, sys
f = json.load(open(sys.argv[1])).get("first_divergence") or {}
seqs = [s["seq"] for s in f.get("sides", []) if s.get("seq")]
print(f["comm"][:8], seqs[0]) if f.get("comm") and seqs else None' "$work/s.json")
  if [ -n "$where" ]; then
    set -- $where
    "$LOCKSTEP" stacks "$dir" --comm "$1" --seq "$2" >"$work/st.n" 2>&1 || true
    "$LOCKSTEP" stacks "$ref" --comm "$1" --seq "$2" >"$work/st.s" 2>&1 || true
    if ! cmp -s <(sed "s|$dir|$ref|g" "$work/st.n") "$work/st.s" || [ ! -s "$work/st.s" ]; then
      echo "FAIL $dir: stacks --comm $1 --seq $2 differs with summaries"; diff "$work/st.n" "$work/st.s" | head; fail=1
    fi
  fi
}

summarized() {  # SRC NAME: a copy of SRC's trace files with summaries, in $work/NAME
  compgen -G "$1/*.lockstep.sqlite" >/dev/null || return 1
  rm -rf "${work:?}/$2" && mkdir -p "$work/$2"
  find "$1" -maxdepth 1 -type f -exec cp -p {} "$work/$2/" \;
  "$LOCKSTEP" summarize "$work/$2" --every-host >/dev/null
}

mkdir -p "$work/gen"
"$GEN" "$work/gen/diverge" --ranks 16 --ops 9000 --rank-names >/dev/null
"$GEN" "$work/gen/clean" --ranks 16 --ops 9000 --diverge-from-end 0 --rank-names >/dev/null
"$GEN" "$work/gen/lag" --ranks 16 --ops 9000 --diverge-from-end 0 --lag-host-ops 16 --rank-names >/dev/null
"$GEN" "$work/gen/early" --ranks 16 --ops 9000 --diverge-from-end 4000 --rank-names >/dev/null
"$GEN" "$work/gen/partial" --ranks 16 --ops 3000 --rank-names >/dev/null
"$GEN" "$work/gen/small" --ranks 8 --ops 600 --rank-names >/dev/null
"$GEN" "$work/gen/nocompl" --ranks 16 --ops 40 --rank-names >/dev/null  # nothing completed
cp -r "$work/gen/diverge" "$work/gen/corrupt"
dd if=/dev/urandom of="$work/gen/corrupt/rank-9.lockstep.sqlite" bs=4096 seek=3 count=8 conv=notrunc status=none
for d in diverge clean lag early partial small nocompl corrupt; do
  summarized "$work/gen/$d" "$d"
  compare "$work/$d" "$work/gen/$d" used report
done
# stacks on the world communicator (of every rank) reads summary first, summaries included: the
# listing of the summarized copy, but its "read:" line, is --full-read's of the traces alone.
for d in diverge lag corrupt; do
  for seq in 1 1000 1024 1100 1124; do
    rc_s=0 rc_f=0
    "$LOCKSTEP" stacks "$work/$d" --comm init0 --seq $seq >"$work/st-s.txt" 2>&1 || rc_s=$?
    "$LOCKSTEP" stacks "$work/gen/$d" --comm init0 --seq $seq --full-read 2>&1 | sed "s|$work/gen/$d|$work/$d|g" >"$work/st-f.txt" || rc_f=$?
    if [ "$rc_s" != "$rc_f" ] || ! diff <(grep -v '^  read: summary first:' "$work/st-s.txt") "$work/st-f.txt" >/dev/null; then
      echo "FAIL stacks $d --seq $seq from summaries: exit $rc_s vs $rc_f"; diff "$work/st-s.txt" "$work/st-f.txt" | head; fail=1
    fi
  done
done
# As on a cluster: files named as the recorder names them (<host>-<pid>), 4 ranks a host, each
# node summarizing its own files (--host, no --every-host): one summary per node, all used.
"$GEN" "$work/gen/nodes" --ranks 16 --ops 3000 --ranks-per-host 4 >/dev/null
rm -rf "$work/nodes" && cp -r "$work/gen/nodes" "$work/nodes"
for h in 0 1 2 3; do "$LOCKSTEP" summarize "$work/nodes" --host "node$h" >/dev/null || { echo "FAIL nodes: summarize --host node$h"; fail=1; }; done
n=$(compgen -G "$work/nodes/*.lockstep-summary" | wc -l)
[ "$n" = 4 ] || { echo "FAIL nodes: $n node summaries, expected 4"; fail=1; }
compare "$work/nodes" "$work/gen/nodes" used
python3 -c 'import json, sys; u = json.load(open(sys.argv[1]))["reading"]["summaries"]; sys.exit(0 if (u["used"], u["files"]) == (4, 16) else "nodes: %s" % u)' "$work/n.json" \
  || { echo "FAIL nodes: not 4 summaries covering 16 files"; fail=1; }
# Every directory of tests/data that holds trace files.
i=0
while IFS= read -r d; do
  i=$((i + 1))
  summarized "$d" "data$i" || continue
  compare "$work/data$i" "$d" any
done < <(find "$DATA" -type d | sort)

# Summaries that must not be trusted. Each case starts from a fresh summarized copy of diverge.
case_dir() {  # NAME: $work/case, summarized; the reference is $work/gen/diverge unless changed
  summarized "$work/gen/diverge" case
}
ref=$work/gen/diverge
# A file rewritten after summarizing (another directory's rank 3: the clean run's).
case_dir; cp "$work/gen/clean/rank-3.lockstep.sqlite" "$work/case/"
rm -rf "$work/ref_rewritten" && cp -r "$work/case" "$work/ref_rewritten" && rm "$work/ref_rewritten"/*.lockstep-summary
compare "$work/case" "$work/ref_rewritten" ignored
grep -q stale "$work/n.json" || { echo "FAIL rewritten: not called stale"; fail=1; }
# The same size and mtime, other content (SQLite's change counter, in its header page).
case_dir; f=$work/case/rank-4.lockstep.sqlite
printf '\x7f\x7f\x7f\x7f' | dd of="$f" bs=1 seek=24 conv=notrunc status=none
touch -r "$work/gen/diverge/rank-4.lockstep.sqlite" "$f"
compare "$work/case" "$ref" ignored
# A covered file missing.
case_dir; rm "$work/case/rank-5.lockstep.sqlite"
rm -rf "$work/ref_missing" && cp -r "$work/case" "$work/ref_missing" && rm "$work/ref_missing"/*.lockstep-summary
compare "$work/case" "$work/ref_missing" ignored
# A -wal file beside a covered file (a live writer): its summary is not trusted.
case_dir; : >"$work/case/rank-6.lockstep.sqlite-wal"
rm -rf "$work/ref_wal" && cp -r "$work/case" "$work/ref_wal" && rm "$work/ref_wal"/*.lockstep-summary
compare "$work/case" "$work/ref_wal" ignored
# Garbage, an SQLite file, a truncated summary, one byte altered, a FIFO, a directory, a symlink.
case_dir; head -c 100000 /dev/urandom >"$work/case/garbage.lockstep-summary"; compare "$work/case" "$ref" ignored
case_dir; cp "$work/gen/clean/rank-1.lockstep.sqlite" "$work/case/sqlite.lockstep-summary"; compare "$work/case" "$ref" ignored
case_dir; s=$work/case/node0.lockstep-summary; head -c $(( $(stat -c %s "$s") / 2 )) "$s" >"$s.t" && mv "$s.t" "$s"
compare "$work/case" "$ref" ignored
case_dir; printf 'X' | dd of="$work/case/node1.lockstep-summary" bs=1 seek=200 conv=notrunc status=none
compare "$work/case" "$ref" ignored
case_dir; mkfifo "$work/case/fifo.lockstep-summary"; compare "$work/case" "$ref" ignored
case_dir; mkdir "$work/case/dir.lockstep-summary"; compare "$work/case" "$ref" ignored
case_dir; mv "$work/case/node0.lockstep-summary" "$work/node0.real"; ln -s "$work/node0.real" "$work/case/node0.lockstep-summary"
compare "$work/case" "$ref" ignored
# Two summaries covering the same file: the second is ignored.
case_dir; cp "$work/case/node0.lockstep-summary" "$work/case/node0-copy.lockstep-summary"; compare "$work/case" "$ref" ignored
# Crafted: a valid checksum and framing, the identity of a real file, content that lies.
craft() {  # NAME KIND
  python3 - "$work/case" "$1" "$2" <<'PY'
import os, struct, sys
d, name, kind = sys.argv[1:4]
def u(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7f) | 0x80]); v >>= 7
    return out + bytes([v])
def s(v): return u((v << 1) ^ (v >> 63) if v >= 0 else ((-v) << 1) - 1)
def st(b): return u(len(b)) + b
M = 0xffffffffffffffff
def rotl(v, r): return ((v << r) | (v >> (64 - r))) & M
def summary_hash(data, seed=0):  # node_summary.h
    lane = [seed, seed ^ 1, seed ^ 2, seed ^ 3]
    i = 0
    while i + 32 <= len(data):
        for l in range(4):
            lane[l] = rotl(((lane[l] ^ int.from_bytes(data[i + 8 * l:i + 8 * l + 8], "little")) * 0x9e3779b97f4a7c15) & M, 29)
        i += 32
    h = seed ^ len(data)
    for v in lane: h = rotl(((h ^ v) * 0x9e3779b97f4a7c15) & M, 29)
    for c in data[i:]: h = ((h ^ c) * 0x9e3779b97f4a7c15) & M
    h ^= h >> 33; h = (h * 0xff51afd7ed558ccd) & M; h ^= h >> 33; h = (h * 0xc4ceb9fe1a85ec53) & M; h ^= h >> 33
    return h
f = os.path.join(d, "rank-0.lockstep.sqlite")
raw = open(f, "rb").read(); info = os.stat(f)
head, tail = raw[:4096], raw[max(0, len(raw) - 4096):]
ident = (st(b"rank-0.lockstep.sqlite") + s(len(raw)) + s(info.st_mtime_ns) + struct.pack("<Q", summary_hash(tail, summary_hash(head)))
         + struct.pack("<Q", 0) + u(int.from_bytes(head[24:28], "big")))  # settled hash 0 (no generation), change counter
meta = u(2) + st(b"schema_version") + st(b"3") + st(b"global_rank") + st(b"7")
if kind == "huge_count":
    body = st(b"h") + u(1 << 62)
elif kind == "huge_rank":
    meta = u(2) + st(b"schema_version") + st(b"3") + st(b"global_rank") + st(b"999999999999")
    body = st(b"h") + u(1) + ident + meta + u(0) * 5 + u(0) + u(0) + u(0) + s(0) + s(0) + u(0) + u(0) + u(0)
elif kind == "bad_sig":
    op = s(5) + s(1) + s(0) + u(7) + u(0) + s(-1) + u(1)
    body = st(b"h") + u(1) + ident + meta + u(0) * 5 + u(0) + u(0) + u(1) + s(0) + s(0) + u(0) + u(0) + u(1) + op
elif kind == "huge_comms":
    comm = s(1) + st(b"c") + u(0) + s(1 << 40) + s(0)
    body = st(b"h") + u(1) + ident + meta + u(0) + u(1) + comm
data = b"lockstep-node-summary\0" + u(4) + body
open(os.path.join(d, name), "wb").write(data + struct.pack("<Q", summary_hash(data)))
PY
}
for kind in huge_count huge_rank bad_sig huge_comms; do
  case_dir; craft "a-$kind.lockstep-summary" "$kind"; compare "$work/case" "$ref" ignored
  # Refused for its content, past the framing: the crafted checksum and version are valid.
  if grep -q "a-$kind.lockstep-summary: \(checksum mismatch\|format version\)" "$work/n.json"; then
    echo "FAIL crafted $kind: refused by its framing, not its content: $(grep -o "a-$kind[^\"]*" "$work/n.json" | head -n 1)"; fail=1
  fi
done
# --every-host writes each host's summary once its files are read, a batch of hosts at a time (32
# files a thread): a file named as another host's (renamed, copied) whose header's host was
# written in an earlier batch joins that host's summary at the end. 12 hosts of 4 files, one
# thread: node0's summary is written in the first batch, its renamed file is read in the second.
"$GEN" "$work/gen/renamed" --ranks 48 --ops 600 --ranks-per-host 4 >/dev/null
moved=$(cd "$work/gen/renamed" && ls node0-*.lockstep.sqlite | head -n 1)
mv "$work/gen/renamed/$moved" "$work/gen/renamed/node9-99999.lockstep.sqlite"
rm -rf "$work/renamed" && mkdir -p "$work/renamed"
find "$work/gen/renamed" -maxdepth 1 -type f -exec cp -p {} "$work/renamed/" \;
"$LOCKSTEP" summarize "$work/renamed" --every-host --threads 1 >"$work/renamed.txt"
grep -q "node0.lockstep-summary: 3 trace files" "$work/renamed.txt" && grep -q "node0.lockstep-summary: 4 trace files" "$work/renamed.txt" ||
  { echo "FAIL summarize --every-host: node0 not written in a batch and again with its renamed file: $(cat "$work/renamed.txt")"; fail=1; }
compare "$work/renamed" "$work/gen/renamed" used
python3 -c "import json,sys; u=json.load(open(sys.argv[1]))['reading']['summaries']; sys.exit(0 if u['files']==48 and u['used']==12 else 'summarize --every-host covered %r' % u)" "$work/n.json" || fail=1
# Summarize without --every-host takes this host's files (<host>-<pid>.lockstep.sqlite) only.
mkdir -p "$work/named"
cp "$work/gen/small/rank-0.lockstep.sqlite" "$work/named/hosta-100.lockstep.sqlite"
cp "$work/gen/small/rank-1.lockstep.sqlite" "$work/named/hostb-200.lockstep.sqlite"
"$LOCKSTEP" summarize "$work/named" --host hosta >/dev/null
[ -f "$work/named/hosta.lockstep-summary" ] && [ ! -f "$work/named/hostb.lockstep-summary" ] ||
  { echo "FAIL summarize --host: wrong summaries: $(ls "$work/named")"; fail=1; }
"$LOCKSTEP" analyze "$work/named" --json --summary-first >"$work/named.json" 2>/dev/null || true
python3 -c "import json,sys; u=json.load(open(sys.argv[1]))['reading']['summaries']; sys.exit(0 if u['files']==1 and u['used']==1 else 'summarize --host covered %r' % u)" "$work/named.json" || fail=1
if "$LOCKSTEP" summarize "$work/named" --host nosuchhost >/dev/null 2>&1; then echo "FAIL summarize of a host with no files succeeded"; fail=1; fi
# A trace name that is a symbolic link (dangling, or to a FIFO) is left out as one, not as "cannot
# open: Too many levels of symbolic links".
mkdir -p "$work/links"
cp "$work/gen/small/rank-0.lockstep.sqlite" "$work/links/"
ln -s "$work/nowhere" "$work/links/rank-1.lockstep.sqlite"
mkfifo "$work/links/fifo"
ln -s "$work/links/fifo" "$work/links/rank-2.lockstep.sqlite"
timeout 30 "$LOCKSTEP" summarize "$work/links" --every-host >"$work/links.txt" 2>&1 || true
if [ "$(grep -c 'a symbolic link (not summarized' "$work/links.txt")" != 2 ] || grep -q 'Too many levels' "$work/links.txt"; then
  echo "FAIL summarize: symbolic links not named as such:"; cat "$work/links.txt"; fail=1
fi
exit $fail
