#!/usr/bin/env python3
"""A node summary of a finished job's trace files stands for them while they are unchanged, end to
end on the CPU NCCL fixture: the recorder writes a content generation into each file (PRAGMA
user_version), which gen_trace's files lack, so this is the case only real recordings show. The
fixed seed schedule runs to its end under `lockstep run`; `lockstep summarize --every-host` covers
both files; `analyze --summary-first` takes them from the summary with nothing ignored and the
direct read's verdict. Then one file is changed (a row updated): the summary is stale, named.

usage: finished_summary_test.py LOCKSTEP LOCKSTEP_LAUNCH SEED_DEADLOCK"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

from e2e_checks import expect, finish

lockstep, launch, seed = sys.argv[1:4]


def analyze(d, *extra):
    r = subprocess.run([lockstep, "analyze", d, "--json", *extra], capture_output=True, text=True, timeout=120)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}


work = tempfile.mkdtemp(prefix="lockstep-finished-summary-")
try:
    d = os.path.join(work, "t")
    r = subprocess.run([lockstep, "run", "-o", d, "--", launch, "-n", "2", "--timeout", "120", "--", seed, "--fixed",
                        "--steps", "3"], capture_output=True, text=True, timeout=180)
    expect(r.returncode == 0, f"the fixed schedule ran to its end ({r.returncode}{': ' + r.stderr[-500:] if r.returncode else ''})")
    fs = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".lockstep.sqlite"))
    expect(len(fs) == 2, f"two trace files ({fs})")
    for f in fs:
        db = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        gen = db.execute("PRAGMA user_version").fetchone()[0]
        done = db.execute("SELECT value FROM meta WHERE key='finished'").fetchone()
        db.close()
        expect(gen > 0 and done and done[0] == "1", f"{os.path.basename(f)}: finished, with a content generation ({gen})")

    s = subprocess.run([lockstep, "summarize", d, "--every-host"], capture_output=True, text=True, timeout=60)
    expect(s.returncode == 0 and ": 2 trace files" in s.stdout, f"summarize covers both files ({s.stdout}{s.stderr})")
    rc, used = analyze(d, "--summary-first")
    reading = used.get("reading", {}).get("summaries", {})
    expect(reading.get("used", 0) >= 1 and reading.get("files") == 2 and reading.get("ignored") == [],
           f"the unchanged finished files are taken from the summary, none ignored ({reading})")
    expect("ignored" not in used.get("reading", {}).get("text", ""), "the read line names nothing ignored")
    rc_full, full = analyze(d, "--full-read")
    expect(rc == rc_full == 0 and used.get("verdict") == full.get("verdict"),
           f"the verdict of the files read directly ({rc} {used.get('verdict')}, {rc_full} {full.get('verdict')})")

    db = sqlite3.connect(fs[0])  # someone else's commit after summarizing
    db.execute("UPDATE meta SET value = value || 'x' WHERE key = 'host'")
    db.commit()
    db.close()
    rc, after = analyze(d, "--summary-first")
    reading = after.get("reading", {}).get("summaries", {})
    ignored = reading.get("ignored", [])
    expect(reading.get("used") == 0 and len(ignored) == 1 and "stale" in ignored[0].get("reason", "")
           and os.path.basename(fs[0]) in ignored[0].get("reason", ""),
           f"a file changed after summarizing makes the summary stale, the file named ({reading})")
finally:
    shutil.rmtree(work, ignore_errors=True)
finish()
