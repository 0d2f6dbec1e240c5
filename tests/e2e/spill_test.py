#!/usr/bin/env python3
"""The recorder's spill (issue 29): a good 2-rank job whose queue is shrunk to 64 records
(LOCKSTEP_QUEUE_RECORDS) refuses records during every burst of the fixture's many small
all-reduces (tests/e2e/forced_drops_test.py drops them with the spill off). With the spill on
(its default), nothing is lost: every run spills records, drops none, holds every all-reduce
under contiguous seqs, and analyze and check say clean (exit 0). A spill too small for a burst,
which drops and counts the overflow, is tested in tests/recorder/writer_spill_test.cpp (here the
writer's pace decides whether a small spill fills, so it cannot be forced).

usage: spill_test.py LOCKSTEP LOCKSTEP_LAUNCH FIXTURE_PROGRAM [RUNS]"""
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

from e2e_checks import expect, finish

lockstep, launch, program = sys.argv[1:4]
RUNS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
OPS = 20000


def run_job(trace, env):
    run = subprocess.run([lockstep, "run", "-o", trace, "--", launch, "-n", "2", "--timeout", "120", "--",
                          program, "many", str(OPS)], capture_output=True, text=True, timeout=280, env=env)
    expect(run.returncode == 0, f"{trace}: the job exits 0 (got {run.returncode}: {run.stderr[-400:]})")
    files = []
    for f in sorted(os.listdir(trace)):
        if f.endswith(".lockstep.sqlite"):
            db = sqlite3.connect(os.path.join(trace, f))
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            seqs = db.execute("SELECT count(*), max(seq) FROM ops WHERE seq IS NOT NULL GROUP BY comm_id "
                              "ORDER BY count(*) DESC LIMIT 1").fetchone()
            db.close()
            files.append((int(meta.get("dropped_records", "-1")), int(meta.get("spilled_records", "0")),
                          int(meta.get("peak_spill_bytes", "0")), seqs))
    analyze = subprocess.run([lockstep, "analyze", trace], capture_output=True, text=True, timeout=120)
    check = subprocess.run([lockstep, "check", trace], capture_output=True, text=True, timeout=120)
    return files, analyze, check


work = tempfile.mkdtemp(prefix="lockstep-spill-")
try:
    base = dict(os.environ, LOCKSTEP_QUEUE_RECORDS="64", LOCKSTEP_STACKS="native")
    base.pop("LOCKSTEP_SPILL_MB", None)
    for i in range(RUNS):
        files, analyze, check = run_job(os.path.join(work, f"spill{i}"), base)
        print(f"run {i}, spill on: (dropped, spilled, peak bytes, (ops, max seq)) per rank {files}; "
              f"analyze exit {analyze.returncode}, check exit {check.returncode}")
        expect(len(files) == 2, f"run {i}: two trace files ({len(files)})")
        expect(all(d == 0 for d, _, _, _ in files), f"run {i}: no record dropped ({files})")
        expect(sum(s for _, s, _, _ in files) > 0, f"run {i}: the shrunk queue spilled ({files})")
        expect(all(q is not None and q[0] >= OPS and q[0] == q[1] for _, _, _, q in files),
               f"run {i}: every all-reduce is there, seqs 1..N without a hole ({files})")
        expect(analyze.returncode == 0 and check.returncode == 0,
               f"run {i}: analyze and check say clean ({analyze.returncode}, {check.returncode}): {check.stdout[-400:]}")
finally:
    shutil.rmtree(work, ignore_errors=True)
finish()
