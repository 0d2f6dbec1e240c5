#!/usr/bin/env python3
"""Records dropped by the recorder's queue in a good 2-rank job, end to end on the CPU NCCL fixture
(issue 29): the queue shrunk to 64 records (LOCKSTEP_QUEUE_RECORDS) refuses records during each
burst of the fixture's many small all-reduces. Over 10 runs every run drops records, and every
verdict (analyze, check) exits 4, incomplete, naming where each rank's evidence stops; never 1 (a
missing record is unknown, not different) and never 0. Prints per run: drops per rank, exit codes.

usage: forced_drops_test.py LOCKSTEP LOCKSTEP_LAUNCH FIXTURE_PROGRAM [RUNS]"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

from e2e_checks import expect, finish

lockstep, launch, program = sys.argv[1:4]
RUNS = int(sys.argv[4]) if len(sys.argv) > 4 else 10
OPS = "20000"

work = tempfile.mkdtemp(prefix="lockstep-drops-")
try:
    # LOCKSTEP_SPILL_MB=0: no spill, so the full queue drops at once (this tests the drop path).
    env = dict(os.environ, LOCKSTEP_QUEUE_RECORDS="64", LOCKSTEP_SPILL_MB="0", LOCKSTEP_STACKS="native")
    for i in range(RUNS):
        trace = os.path.join(work, f"run{i}")
        run = subprocess.run([lockstep, "run", "-o", trace, "--", launch, "-n", "2", "--timeout", "120", "--",
                              program, "many", OPS], capture_output=True, text=True, timeout=280, env=env)
        expect(run.returncode == 0, f"run {i}: the job exits 0 (got {run.returncode}: {run.stderr[-400:]})")
        drops = []
        for f in sorted(os.listdir(trace)):
            if f.endswith(".lockstep.sqlite"):
                db = sqlite3.connect(os.path.join(trace, f))
                drops.append(int(db.execute("SELECT value FROM meta WHERE key='dropped_records'").fetchone()[0]))
                db.close()
        analyze = subprocess.run([lockstep, "analyze", "--json", trace], capture_output=True, text=True, timeout=120)
        check = subprocess.run([lockstep, "check", trace], capture_output=True, text=True, timeout=120)
        j = json.loads(analyze.stdout) if analyze.stdout.startswith("{") else {}
        gaps = [e for e in j.get("evidence", []) if e["kind"] == "evidence_gap"]
        print(f"run {i}: dropped_records per rank {drops}; analyze exit {analyze.returncode}, check exit {check.returncode}; "
              f"evidence gaps {[(e['ranks'], e.get('from_seq'), e.get('gap_cause')) for e in gaps]}")
        expect(len(drops) == 2 and sum(drops) > 0, f"run {i}: the shrunk queue dropped records ({drops})")
        expect(analyze.returncode == 4 and check.returncode == 4,
               f"run {i}: analyze and check exit 4, never 1 or 0 ({analyze.returncode}, {check.returncode}): "
               f"{check.stdout[-600:]}")
        expect(not j.get("divergences"), f"run {i}: no divergence is claimed ({j.get('divergences', [])[:1]})")
        dropped_ranks = {r for r, d in enumerate(drops) if d > 0}
        named = {r for e in gaps for r in e["ranks"]}
        expect(dropped_ranks <= named, f"run {i}: every rank that dropped records has its gap named ({named})")
        expect("evidence is whole through seq" in check.stdout, f"run {i}: check's text names where the evidence stops")
finally:
    shutil.rmtree(work, ignore_errors=True)
finish()
