#!/usr/bin/env python3
"""Mutation test over whole trace directories: copies real trace directories, applies random
row/value mutations through SQL (extreme numbers, NULLs, invalid UTF-8, control characters,
huge strings, deleted/duplicated rows, dropped tables) and file-level ones (a file truncated,
duplicated, emptied, deleted), then runs every CLI command that reads a trace on each copy:

  analyze, analyze --json, check, stacks, ops, timeline -o, timeline --text, replay --model

A finding is a crash (killed by a signal: exit >= 128 or a negative status), a hang (no exit
within --timeout-s) or invalid JSON from analyze --json / replay --model --json / timeline -o.
Exit status: 0 no finding, 1 findings (each printed with its reproduction), 2 usage error.
Findings are grouped into classes (command + signal + first line of the abort message).

  tests/fuzz/mutate_traces.py --lockstep build/bin/lockstep --count 600 tests/data/*/
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

HOSTILE = [
    "NULL", "0", "-1", "1", "2", "9223372036854775807", "-9223372036854775808", "2147483647", "2147483648",
    "4294967296", "-2147483649", "1e308", "-1e308", "0.5", "''", "'x'", "CAST(x'ff' AS TEXT)",
    "CAST(x'c3' AS TEXT)", "CAST(x'80808080' AS TEXT)", "CAST(x'eda080' AS TEXT)", "x'00'",
    "'bad' || char(27) || ']0;pwned' || char(7)", "'a' || char(13) || 'lockstep: clean'",
    "char(10) || 'rank 0: ok'", "'%s%n%x'", "'NaN'", "'12abc'", "'9999999999999999999999'", "'SIGKILL'",
    "'SIGTERM'", "'disk_full'", "'all_to_all'", "'send'", "'recv'", "'graph_launched'", "'captured'",
    "'0000000000000000'", "randomblob(32)",
]


def hostile(rng):
    r = rng.random()
    if r < 0.08:
        return f"printf('%.*c', {rng.randint(1, 300000)}, 'A')"
    if r < 0.2:
        return str(rng.randint(-2**63, 2**63 - 1))
    if r < 0.35:
        return str(rng.randint(-8, 64))
    return rng.choice(HOSTILE)


def qi(name):
    return '"' + name.replace('"', '""') + '"'


def sql_mutation(db, rng):
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
    if not tables:
        return None
    weighted = [t for t in tables if t in ("ops", "comms", "meta", "op_parts", "completions")]
    t = rng.choice(weighted if weighted and rng.random() < 0.6 else tables)
    cols = [r[1] for r in db.execute(f"PRAGMA table_info({qi(t)})")]
    rows = db.execute(f"SELECT count(*) FROM {qi(t)}").fetchone()[0]
    row = f"(SELECT rowid FROM {qi(t)} LIMIT 1 OFFSET {rng.randrange(rows)})" if rows else "0"
    k = rng.randrange(10)
    if k <= 3 and cols:
        sql = f"UPDATE OR IGNORE {qi(t)} SET {qi(rng.choice(cols))} = {hostile(rng)} WHERE rowid = {row}"
    elif k == 4 and cols:
        sql = f"UPDATE OR IGNORE {qi(t)} SET {qi(rng.choice(cols))} = {hostile(rng)}"
    elif k == 5 and cols and rows > 1:
        c = qi(rng.choice(cols))
        sql = (f"UPDATE OR IGNORE {qi(t)} SET {c} = (SELECT {c} FROM {qi(t)} LIMIT 1 OFFSET {rng.randrange(rows)}) "
               f"WHERE rowid = {row}")
    elif k == 6:
        sql = f"DELETE FROM {qi(t)}" + (f" WHERE rowid = {row}" if rng.random() < 0.75 else "")
    elif k == 7 and cols and rows:
        lst = ",".join(qi(c) for c in cols)
        sel = ",".join((f"(SELECT max({qi(c)}) FROM {qi(t)}) + 1" if i == 0 else qi(c)) for i, c in enumerate(cols))
        sql = f"INSERT OR IGNORE INTO {qi(t)}({lst}) SELECT {sel} FROM {qi(t)} WHERE rowid = {row}"
    elif k == 8:
        sql = (f"UPDATE meta SET value = {hostile(rng)} WHERE rowid = "
               f"(SELECT rowid FROM meta LIMIT 1 OFFSET {rng.randrange(32)})")
    elif k == 9 and rng.random() < 0.2:
        sql = f"DROP TABLE {qi(t)}"
    else:
        sql = f"UPDATE OR IGNORE {qi(t)} SET rowid = rowid + {rng.randint(1, 3)} WHERE rowid = {row}"
    try:
        db.execute(sql)
        return sql
    except sqlite3.Error as e:
        return f"-- failed: {sql} ({e})"


SQLITE_HEADER = b"SQLite format 3\0"


def copy_source(src, dst):
    """A trace directory is copied; a fuzz corpus file (SQLite files concatenated) is split."""
    if os.path.isdir(src):
        shutil.copytree(src, dst)
        return
    os.makedirs(dst)
    data = open(src, "rb").read()
    starts = [i for i in range(len(data)) if data.startswith(SQLITE_HEADER, i)] or [0]
    for n, (a, b) in enumerate(zip(starts, starts[1:] + [len(data)])):
        with open(os.path.join(dst, f"rank{n}.lockstep.sqlite"), "wb") as f:
            f.write(data[a:b])


def mutate_dir(src, dst, rng):
    copy_source(src, dst)
    files = sorted(f for f in os.listdir(dst) if f.endswith(".lockstep.sqlite"))
    log = []
    r = rng.random()
    if r < 0.08 and files:  # file-level mutation
        f = os.path.join(dst, rng.choice(files))
        kind = rng.choice(["truncate", "duplicate", "empty", "delete", "garbage-tail"])
        if kind == "truncate":
            size = os.path.getsize(f)
            os.truncate(f, rng.randrange(max(size, 1)))
        elif kind == "duplicate":
            shutil.copyfile(f, f.replace(".lockstep.sqlite", "-copy.lockstep.sqlite"))
        elif kind == "empty":
            open(f, "wb").close()
        elif kind == "delete":
            os.remove(f)
        else:
            with open(f, "ab") as fh:
                fh.write(rng.randbytes(rng.randint(1, 5000)))
        log.append(f"{kind} {os.path.basename(f)}")
        return log
    for _ in range(rng.randint(1, 4)):
        f = rng.choice(files)
        db = sqlite3.connect(os.path.join(dst, f), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=DELETE")
            sql = sql_mutation(db, rng)
            if sql:
                log.append(f"{f}: {sql}")
        except sqlite3.Error as e:
            log.append(f"{f}: -- not a database ({e})")
        finally:
            db.close()
    return log


def target_of(d):
    """A comm prefix and seq for stacks/ops, read from the first file that has them."""
    for f in sorted(os.listdir(d)):
        try:
            db = sqlite3.connect(f"file:{os.path.join(d, f)}?mode=ro", uri=True)
            db.text_factory = bytes
            row = db.execute("SELECT comm_hash FROM comms LIMIT 1").fetchone()
            db.close()
            if row and row[0]:
                h = row[0] if isinstance(row[0], bytes) else str(row[0]).encode()
                return h[:8].decode("ascii", "replace"), "3"
        except (sqlite3.Error, OSError):
            continue
    return "0", "1"


def commands(d, out_json):
    comm, seq = target_of(d)
    return [
        ("analyze", ["analyze", d], None),
        ("analyze --json", ["analyze", d, "--json"], "stdout"),
        ("check", ["check", d], None),
        ("stacks", ["stacks", d, "--comm", comm, "--seq", seq], None),
        ("ops", ["ops", d, "--rank", "0"], None),
        ("timeline -o", ["timeline", d, "-o", out_json], "file"),
        ("timeline --text", ["timeline", d, "--text"], None),
        ("replay --model", ["replay", d, "--model", "--json"], "stdout"),
    ]


def first_line(err):
    lines = err.decode("utf-8", "replace").splitlines()
    for line in sorted(lines, key=lambda l: 0 if "what()" in l else 1):
        if "what()" in line or "Assertion" in line or "ERROR" in line or "terminate" in line:
            # Numbers and paths vary between findings of one class.
            return re.sub(r"\d+", "N", re.sub(r"/\S+", "PATH", line.strip()))[:160]
    return ""


def run_one(lockstep, name, args, check_json, out_json, timeout):
    if os.path.exists(out_json):
        os.remove(out_json)
    try:
        p = subprocess.run([lockstep] + args, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ("hang", f"no exit within {timeout}s")
    rc = p.returncode
    if rc < 0 or rc >= 128:
        sig = -rc if rc < 0 else rc - 128
        try:
            signame = signal.Signals(sig).name
        except ValueError:
            signame = str(sig)
        return (f"crash {signame}", first_line(p.stderr) or p.stderr.decode("utf-8", "replace")[-300:])
    if check_json and rc in (0, 1, 3, 4):
        text = p.stdout if check_json == "stdout" else (open(out_json, "rb").read() if rc == 0 and os.path.exists(out_json) else None)
        if text is not None:
            try:
                json.loads(text.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                return ("invalid JSON", str(e)[:160])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lockstep", required=True, help="the lockstep executable")
    ap.add_argument("--count", type=int, default=100, help="mutated directories")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=30, help="per command: longer is a hang")
    ap.add_argument("--budget-s", type=float, default=0, help="stop making mutants after this long (0: no limit)")
    ap.add_argument("--work", default="/tmp/lockstep-mutate-traces", help="scratch directory (emptied)")
    ap.add_argument("--keep", help="copy each directory with a finding here")
    ap.add_argument("dirs", nargs="+", help="trace directories, fuzz corpus files or directories of them")
    a = ap.parse_args()
    srcs = []
    for d in a.dirs:  # directories of traces, or of fuzz corpus files
        if os.path.isdir(d) and not any(f.endswith(".lockstep.sqlite") for f in os.listdir(d)):
            srcs += sorted(os.path.join(d, f) for f in os.listdir(d) if not f.endswith(".md"))
        elif os.path.exists(d):
            srcs.append(d)
    if not srcs:
        print("mutate_traces: no trace directory given exists", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    start = time.monotonic()
    classes = {}
    runs = done = 0
    for i in range(a.count):
        if a.budget_s and time.monotonic() - start > a.budget_s:
            break
        src = srcs[i % len(srcs)]
        d = os.path.join(a.work, f"m{i:04d}")
        log = mutate_dir(src, d, rng)
        out_json = os.path.join(a.work, f"m{i:04d}.timeline.json")
        for name, args, check_json in commands(d, out_json):
            runs += 1
            r = run_one(a.lockstep, name, args, check_json, out_json, a.timeout_s)
            if r:
                key = (name, r[0], r[1] if r[0].startswith("crash") else "")
                cls = classes.setdefault(key, {"count": 0, "example": None})
                cls["count"] += 1
                if cls["example"] is None:
                    cls["example"] = {"src": src, "mutations": log, "args": args, "detail": r[1]}
                    if a.keep:
                        shutil.copytree(d, os.path.join(a.keep, f"m{i:04d}"), dirs_exist_ok=True)
        done += 1
        shutil.rmtree(d, ignore_errors=True)
    elapsed = time.monotonic() - start
    findings = sum(c["count"] for c in classes.values())
    print(f"mutate_traces: {done} mutated directories x 8 commands = {runs} runs in {elapsed:.0f}s "
          f"(seed {a.seed}): {findings} findings in {len(classes)} classes")
    for (name, kind, sig), c in sorted(classes.items(), key=lambda kv: -kv[1]["count"]):
        ex = c["example"]
        print(f"\n[{c['count']}x] {name}: {kind} {sig}")
        print(f"  source: {ex['src']}")
        for m in ex["mutations"]:
            print(f"  mutation: {m[:300]}")
        print(f"  reproduce: apply the mutation to a copy of the source, then: lockstep {' '.join(ex['args'][:1])} DIR"
              f" {' '.join(ex['args'][2:])}")
        print(f"  detail: {ex['detail'][:300]}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
