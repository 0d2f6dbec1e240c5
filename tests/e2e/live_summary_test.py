#!/usr/bin/env python3
"""A node summary written while a job hangs stays usable while the job hangs, end to end on the
CPU NCCL fixture: the seed schedule hangs under `lockstep run`; its recorders keep committing a
heartbeat (meta last_flush_mono_ns, about once a second) and nothing else; `lockstep summarize`
covers both files; seconds later `analyze` still takes them from the summary (named "refreshed"
in text and JSON), with the same verdict and hang as the files read directly, and both ranks
live as from the files: the summary's last flush is taken forward by the files' mtimes. Then the job is stopped: its
recorders write their exit, the content generation moves, and the summary is stale.

usage: live_summary_test.py LOCKSTEP LOCKSTEP_LAUNCH SEED_DEADLOCK"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from e2e_checks import expect, finish

lockstep, launch, seed = sys.argv[1:4]
STALE = "3"  # analyze --stale-seconds: a heartbeat is about 1 s; a loaded machine may delay one


def files(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".lockstep.sqlite"))


def read(path, sql):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        row = db.execute(sql).fetchone()
        return row[0] if row else None
    finally:
        db.close()


def last_flush(path):
    return int(read(path, "SELECT value FROM meta WHERE key='last_flush_mono_ns'"))


def analyze(d, *extra):
    r = subprocess.run([lockstep, "analyze", d, "--json", "--stale-seconds", STALE, *extra], capture_output=True, text=True,
                       timeout=120)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}


def wait_for(what, cond, seconds=60):
    end = time.time() + seconds
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.2)
    expect(False, f"{what} within {seconds} s")
    return False


work = tempfile.mkdtemp(prefix="lockstep-live-summary-")
job = None
try:
    d = os.path.join(work, "t")
    log = open(os.path.join(work, "job.log"), "w")
    job = subprocess.Popen([lockstep, "run", "-o", d, "--hang-timeout", "2", "--", launch, "-n", "2", "--timeout", "200",
                            "--", seed], stdout=log, stderr=subprocess.STDOUT)
    text = lambda: open(os.path.join(work, "job.log")).read()
    if not wait_for("both ranks' hang lines", lambda: text().count("no NCCL progress for") >= 2, 90):
        raise SystemExit(finish())
    fs = files(d)
    expect(len(fs) == 2, f"two trace files ({fs})")
    # The hang line is printed before its row is committed (a content commit): summarize once
    # every file's generation held still for two heartbeats.
    stable = {"gen": None, "since": time.time()}

    def settled():
        g = [read(f, "PRAGMA user_version") for f in fs]
        if g != stable["gen"]:
            stable["gen"], stable["since"] = g, time.time()
        return time.time() - stable["since"] >= 2.2

    wait_for("each file's generation to hold still", settled, 30)
    gen = [read(f, "PRAGMA user_version") for f in fs]
    expect(all(g > 0 for g in gen), f"each recorder's file says its content generation ({gen})")

    s = subprocess.run([lockstep, "summarize", d], capture_output=True, text=True, timeout=60)
    expect(s.returncode == 0 and ": 2 trace files" in s.stdout, f"summarize covers both files ({s.stdout}{s.stderr})")
    flush_then = [last_flush(f) for f in fs]
    mtime_then = [os.stat(f).st_mtime_ns for f in fs]
    wait_for("a heartbeat in each file", lambda: all(last_flush(f) > t for f, t in zip(fs, flush_then)), 10)
    time.sleep(5)  # and more: the summary's own last flush is now older than STALE
    expect([read(f, "PRAGMA user_version") for f in fs] == gen,
           "the heartbeats left each file's content generation as it was")
    expect(all(os.stat(f).st_mtime_ns > m for f, m in zip(fs, mtime_then)), "the heartbeats changed the files")

    rc, from_summary = analyze(d)
    # The same files read directly: a copy without the summary (the job still hangs, so only
    # heartbeats may land in between; the live check is about this host's processes either way).
    direct_dir = os.path.join(work, "direct")
    os.mkdir(direct_dir)
    for f in fs:  # SQLite's backup: a consistent copy of a file its recorder is writing
        src = sqlite3.connect(f"file:{f}?mode=ro", uri=True, timeout=10)
        dst = sqlite3.connect(os.path.join(direct_dir, os.path.basename(f)))
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
    rc_direct, direct = analyze(direct_dir)
    reading = from_summary.get("reading", {}).get("summaries", {})
    expect(reading.get("used") == 1 and reading.get("files") == 2 and reading.get("refreshed") == 2
           and reading.get("ignored") == [],
           f"analyze takes both files from the summary, named refreshed by heartbeats ({reading})")
    expect("refreshed since only by their recorder's heartbeat" in from_summary.get("reading", {}).get("text", ""),
           "the read line says so")
    expect(rc == rc_direct == 1, f"exit 1 (divergence) from the summary as from the files ({rc}, {rc_direct})")
    for key in ("verdict", "first_divergence", "hang"):
        expect(from_summary.get(key) == direct.get(key), f"the same {key} as from the files")
    # Live: on this host, process alive, flushed within STALE seconds. The summary's own last
    # flush is older than that; taken forward by the files' mtimes it is not.
    expect(from_summary.get("live_ranks") == direct.get("live_ranks") == [0, 1],
           f"both ranks live, as from the files ({from_summary.get('live_ranks')}, {direct.get('live_ranks')})")

    job.terminate()
    job.wait(timeout=60)
    wait_for("the exit records (a content commit each)",
             lambda: all(read(f, "SELECT value FROM meta WHERE key='exit_reason'") and read(f, "PRAGMA user_version") != g
                         for f, g in zip(fs, gen)), 20)
    rc, after = analyze(d)
    reading = after.get("reading", {}).get("summaries", {})
    expect(reading.get("used") == 0 and len(reading.get("ignored", [])) == 1
           and "stale" in reading["ignored"][0].get("reason", ""),
           f"after the job's end the summary is stale, its files read ({reading})")
finally:
    if job and job.poll() is None:
        job.kill()
        job.wait()
    shutil.rmtree(work, ignore_errors=True)
finish()
