#!/usr/bin/env python3
"""A killed process with a capped trace loses nothing committed (issue 11), end to end on the CPU
NCCL fixture: a 2-rank run past its 1 MiB cap, rank 1 SIGKILLed mid-run. Its file reads, holds
every op up to the newest committed one with no hole after its retired history, its retained
window verifies against its own checkpoints, and the verdict names its lost tail as incomplete evidence and the
killed rank (a hang with incomplete evidence, exit 1, or exit 4), never clean.

usage: capped_kill_test.py LOCKSTEP LOCKSTEP_LAUNCH FIXTURE_PROGRAM"""
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

from e2e_checks import expect, finish

lockstep, launch, program = sys.argv[1:4]


def query(path, sql, args=()):
    """One row of a read-only query; None while the writer holds the file (busy) or it is not there yet."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2)
        try:
            return db.execute(sql, args).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None


def meta(path, key):
    row = query(path, "SELECT value FROM meta WHERE key=?", (key,))
    return row[0] if row else None


work = tempfile.mkdtemp(prefix="lockstep-capped-kill-")
job = None
try:
    trace = os.path.join(work, "t")
    # Far more steps than the test lets it run: rank 1 is killed long before the end.
    job = subprocess.Popen([lockstep, "run", "-o", trace, "--max-mb", "1", "--", launch, "-n", "2", "--",
                            program, "many", "100000000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    victim = None
    deadline = time.time() + 180
    while time.time() < deadline and victim is None:
        time.sleep(0.5)
        if not os.path.isdir(trace):
            continue
        for f in os.listdir(trace):
            path = os.path.join(trace, f)
            if f.endswith(".lockstep.sqlite") and meta(path, "global_rank") == "1":
                retired = meta(path, "retired_ops")
                if retired and int(retired) > 0:
                    victim = path
    expect(victim is not None, "rank 1's trace passed its cap (retired_ops > 0) while the job ran")
    if victim is None:
        raise SystemExit(1)
    # Let it retire a few more chunks, then kill it where it stands: no handler runs.
    time.sleep(1.0)
    committed_before = query(victim, "SELECT max(call_index) FROM op_rows_all")
    os.kill(int(meta(victim, "pid")), signal.SIGKILL)
    # Rank 0 now waits for rank 1 forever: end it as a job's timeout would (its trace says so).
    time.sleep(1.0)
    for f in os.listdir(trace):
        path = os.path.join(trace, f)
        if f.endswith(".lockstep.sqlite") and path != victim:
            try:
                os.kill(int(meta(path, "pid")), signal.SIGTERM)
            except (ProcessLookupError, TypeError, ValueError):
                pass
    try:
        job.communicate(timeout=60)  # the launcher stops rank 0 once rank 1 died
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
    expect(job.returncode != 0, f"the job does not pass as a success (exit {job.returncode})")

    # Killed mid-commit, the file has a hot journal: a read-only connection cannot roll it back, so
    # read a private copy (as the analyzer does), rolled back on open.
    copy = os.path.join(work, "victim.sqlite")
    shutil.copy(victim, copy)
    if os.path.exists(victim + "-journal"):
        shutil.copy(victim + "-journal", copy + "-journal")
    db = sqlite3.connect(copy)
    expect(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "the killed rank's file is intact")
    retired = int(db.execute("SELECT value FROM meta WHERE key='retired_ops'").fetchone()[0])
    lo, hi, kept = db.execute("SELECT min(call_index), max(call_index), count(*) FROM op_rows_all").fetchone()
    finished = db.execute("SELECT value FROM meta WHERE key='finished'").fetchone()[0]
    expect(finished == "0" and db.execute("SELECT value FROM meta WHERE key='exit_reason'").fetchone() is None,
           "the killed rank's file says it never finished (no exit_reason)")
    expect(retired > 0, f"the cap retired {retired} ops")
    expect(committed_before is not None and hi >= committed_before[0],
           f"every op committed before the kill is still there (newest {hi} >= {committed_before})")
    # Nothing lost between the retired history and the newest op: the calls are ops or
    # communicator calls, so count the retained sequenced ops per communicator instead.
    for comm, through in db.execute("SELECT id, retired_through_seq FROM comms"):
        first, last, n = db.execute("SELECT min(seq), max(seq), count(seq) FROM op_rows_all r JOIN signatures s "
                                    "ON s.id = r.sig WHERE s.comm_id = ? AND r.seq IS NOT NULL", (comm,)).fetchone()
        if n == 0:
            continue
        expect(first == through + 1 and last - first + 1 == n,
               f"comm {comm}: retained seq {first}..{last} ({n} ops) follows the retired history (through seq {through})"
               " with no hole")
    expect(db.execute("SELECT count(*) FROM checkpoints").fetchone()[0] > 0, "the killed rank kept its checkpoints")
    db.close()

    check = subprocess.run([lockstep, "check", trace], capture_output=True, text=True, timeout=120)
    out = check.stdout + check.stderr
    print(out[-3000:])
    # The survivor is blocked waiting for the dead rank: a hang (1) with incomplete evidence, or
    # incomplete evidence (4) when it was stopped seconds after its last op (not a proven wait:
    # hang.h HangOptions::stuck_ns); never clean (0).
    expect(check.returncode in (1, 4), f"check on the killed capped run is not clean (exit {check.returncode})")
    expect("incomplete: rank 1: trace ends without an exit record" in out
           and "after its last flush is unknown" in out,
           "the verdict names the killed rank's lost tail as incomplete evidence")
    expect("does not match the collectives it holds" not in out and "known by digest only" in out,
           "the killed rank's retained window verifies against its own checkpoints (retired history known by digest)")
    expect("verdict: clean" not in out and "lockstep check: clean" not in out, "the verdict is never clean")
finally:
    if job and job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
    shutil.rmtree(work, ignore_errors=True)

finish()
