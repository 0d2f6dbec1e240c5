#!/usr/bin/env python3
"""One rank's recorder stopped by `ulimit -f` in a good 2-rank job, end to end on the CPU NCCL
fixture (issue 29): the program's fate is what it is without the recorder (exit code, its own
lines, no SIGXFSZ); the stopped rank's trace records where it stopped (a drops row per
communicator, reason recorder_stopped, at the first seq it did not commit); analyze, check and
replay --model exit 4 (incomplete), never 1 (no divergence, no hang, no deadlock is claimed on
records we do not have) and never 0, and name the gap in text and JSON.

usage: stopped_rank_test.py LOCKSTEP LOCKSTEP_LAUNCH FIXTURE_PROGRAM"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

from e2e_checks import expect, finish

lockstep, launch, program = sys.argv[1:4]
OPS = "200000"  # rank 1's trace passes 4 MiB (~35 bytes an op); the fixture's own files fit
# Only rank 1 is limited: 8192 blocks of 512 bytes under /bin/sh (dash), 4 MiB.
RANK_SHELL = 'if [ "$RANK" = 1 ]; then ulimit -f 8192; fi; exec "$0" "$@"'


def job(record_dir):
    argv = [launch, "-n", "2", "--timeout", "120", "--", "/bin/sh", "-c", RANK_SHELL, program, "many", OPS]
    if record_dir:
        argv = [lockstep, "run", "-o", record_dir, "--"] + argv
    return subprocess.run(argv, capture_output=True, text=True, timeout=280)


def program_lines(r):
    return sorted(l for l in (r.stdout + r.stderr).splitlines() if "all-reduces done" in l)


def trace_of(dir, rank):
    for f in sorted(os.listdir(dir)):
        if not f.endswith(".lockstep.sqlite"):
            continue
        db = sqlite3.connect(os.path.join(dir, f))
        try:
            row = db.execute("SELECT value FROM meta WHERE key='global_rank'").fetchone()
        finally:
            db.close()
        if row and row[0] == str(rank):
            return os.path.join(dir, f)
    return None


work = tempfile.mkdtemp(prefix="lockstep-stopped-")
try:
    ref = job(None)
    expect(ref.returncode == 0, f"without the recorder the job exits 0 (got {ref.returncode}: {ref.stderr[-400:]})")
    trace = os.path.join(work, "t")
    run = job(trace)
    expect(run.returncode == ref.returncode,
           f"with the recorder the job exits as without it ({run.returncode} vs {ref.returncode}: {run.stderr[-600:]})")
    expect(program_lines(run) == program_lines(ref) and len(program_lines(ref)) == 2,
           f"the program's own lines are the same ({program_lines(run)} vs {program_lines(ref)})")
    expect("signal" not in run.stderr or "SIGXFSZ" not in run.stderr, "no rank died of SIGXFSZ")
    expect(run.stderr.count("recording stopped (file_size_limit") == 1,
           "rank 1's recorder (only) says once that it stopped at the file-size limit")

    t0, t1 = trace_of(trace, 0), trace_of(trace, 1)
    expect(t0 is not None and t1 is not None, f"a trace per rank ({os.listdir(trace)})")
    db = sqlite3.connect(t1)
    stopped = db.execute("SELECT value FROM meta WHERE key='recorder_stopped'").fetchone()
    stop_rows = db.execute("SELECT comm_id, first_seq, last_seq FROM drops WHERE reason='recorder_stopped'").fetchall()
    kept = dict(db.execute("SELECT comm_id, max(seq) FROM ops WHERE seq > 0 GROUP BY comm_id").fetchall())
    db.close()
    expect(stopped == ("file_size_limit",), f"rank 1: meta recorder_stopped = file_size_limit ({stopped})")
    expect(len(stop_rows) >= 1, f"rank 1: its stop point is recorded, a drops row per communicator ({stop_rows})")
    for comm, first, last in stop_rows:
        expect(last is None and comm in kept and first == kept[comm] + 1,
               f"rank 1: comm {comm}: the stop point is the first seq not in the file ({first}, last held {kept.get(comm)})")
    stop_seq = stop_rows[0][1] if stop_rows else -1
    db = sqlite3.connect(t0)
    expect(db.execute("SELECT value FROM meta WHERE key='recorder_stopped'").fetchone() is None,
           "rank 0's recorder did not stop")
    db.close()

    analyze = subprocess.run([lockstep, "analyze", trace], capture_output=True, text=True, timeout=120)
    expect(analyze.returncode == 4, f"analyze exits 4, incomplete (got {analyze.returncode}): {analyze.stdout[-900:]}")
    expect(f"its recorder stopped (file_size_limit) before seq {stop_seq}" in analyze.stdout,
           "analyze's text names where rank 1's evidence stops")
    check = subprocess.run([lockstep, "check", trace], capture_output=True, text=True, timeout=120)
    expect(check.returncode == 4, f"check exits 4 (got {check.returncode}): {check.stdout[-900:]}")
    aj = subprocess.run([lockstep, "analyze", "--json", trace], capture_output=True, text=True, timeout=120)
    expect(aj.returncode == 4, f"analyze --json exits 4 (got {aj.returncode})")
    j = json.loads(aj.stdout)
    expect(j["verdict"] == "incomplete" and not j["divergences"],
           f"JSON: verdict incomplete, no divergence ({j['verdict']}, {j['divergences'][:1]})")
    gaps = [e for e in j["evidence"] if e["kind"] == "evidence_gap"]
    expect(any(e.get("gap_cause") == "recorder_stopped" and e.get("from_seq") == stop_seq and e["ranks"] == [1]
               for e in gaps), f"JSON: an evidence_gap of rank 1 from seq {stop_seq}, cause recorder_stopped ({gaps})")

    model = subprocess.run([lockstep, "replay", "--model", trace], capture_output=True, text=True, timeout=120)
    expect(model.returncode == 4, f"replay --model exits 4 (got {model.returncode}): {model.stdout[-900:]}")
    expect("model check: deadlock" not in model.stdout and "never" not in model.stdout,
           f"replay --model claims no deadlock and nothing never issued: {model.stdout[-900:]}")
    mj = subprocess.run([lockstep, "replay", "--model", "--json", trace], capture_output=True, text=True, timeout=120)
    m = json.loads(mj.stdout)
    expect(mj.returncode == 4 and m["verdict"] in ("can complete", "unknown"),
           f"replay --model --json: exit 4, no deadlock ({mj.returncode}, {m['verdict']})")
    expect(any(f"from seq {stop_seq} on are missing (recorder_stopped)" in p for p in m["problems"]),
           f"replay --model --json names the gap among its problems ({m['problems']})")
finally:
    shutil.rmtree(work, ignore_errors=True)
finish()
