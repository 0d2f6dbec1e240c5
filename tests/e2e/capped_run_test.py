#!/usr/bin/env python3
"""A run that exceeds its size cap (issue 11), end to end on the CPU NCCL fixture:
the recorder retires the oldest ops, the files stay under the cap, `lockstep check` passes with
the retired history proven by checkpoint digests, and a tampered checkpoint makes the verdict
incomplete (exit 4), never clean. `check --baseline` and `replay --model` align members and runs
by absolute collective ordinal (retired + position): two capped runs whose retained windows differ
are compared on the collectives both hold, and say which; a run that issued a different number
of collectives (a window's last ordinal is the count: the cap retires only the oldest) differs
from the baseline (exit 3), whatever the windows share.

usage: capped_run_test.py LOCKSTEP LOCKSTEP_LAUNCH FIXTURE_PROGRAM"""
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

from e2e_checks import expect, finish

lockstep, launch, program = sys.argv[1:4]


def meta(path, key):
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None
    finally:
        db.close()


work = tempfile.mkdtemp(prefix="lockstep-capped-")
try:
    trace = os.path.join(work, "t")
    run = subprocess.run([lockstep, "run", "-o", trace, "--max-mb", "1", "--", launch, "-n", "2", "--",
                          program, "many", "60000"], capture_output=True, text=True, timeout=240)
    expect(run.returncode == 0, f"the capped run exits 0 (got {run.returncode}: {run.stderr[-400:]})")
    files = sorted(os.path.join(trace, f) for f in os.listdir(trace) if f.endswith(".lockstep.sqlite"))
    expect(len(files) == 2, f"two trace files ({files})")
    for f in files:
        size = os.path.getsize(f)
        expect(size <= 1024 * 1024 * 11 // 10, f"{os.path.basename(f)}: {size} bytes, under the 1 MiB cap + 10%")
        retired = int(meta(f, "retired_ops") or 0)
        expect(retired > 0, f"{os.path.basename(f)}: the cap retired {retired} ops")
        db = sqlite3.connect(f)
        newest = db.execute("SELECT max(seq) FROM op_rows_all").fetchone()[0]
        kept = db.execute("SELECT count(*) FROM op_rows_all").fetchone()[0]
        db.close()
        expect(newest == 60000, f"{os.path.basename(f)}: the newest op (seq 60000) is kept exactly (max seq {newest})")
        expect(kept + retired == 60000, f"{os.path.basename(f)}: kept {kept} + retired {retired} = 60000 ops")

    check = subprocess.run([lockstep, "check", trace], capture_output=True, text=True, timeout=120)
    expect(check.returncode == 0, f"check passes on the capped run (exit {check.returncode}): {check.stdout[-600:]}")
    expect("proven identical before that by checkpoint digest" in check.stdout,
           "check says the retired history is known by digest")

    # The model checker aligns the members' windows by ordinal: the capped run can complete.
    model = subprocess.run([lockstep, "replay", "--model", trace], capture_output=True, text=True, timeout=120)
    expect(model.returncode == 0 and "can complete" in model.stdout,
           f"replay --model on the capped run: can complete (exit {model.returncode}): {model.stdout[-600:]}")

    # Baselines of capped runs: a run with more steps retires more, so its window lies later.
    base = os.path.join(work, "capped.baseline")
    wrote = subprocess.run([lockstep, "check", trace, "--write-baseline", base], capture_output=True, text=True,
                           timeout=120)
    expect(wrote.returncode == 0, f"a baseline is written from the capped run (exit {wrote.returncode})")
    text = open(base).read()
    expect("collectives=#" in text, "the baseline says which collectives of the communicator it holds")
    # The same schedule under a larger cap: its window starts earlier; compared on what both hold.
    wider = os.path.join(work, "wider")
    run2 = subprocess.run([lockstep, "run", "-o", wider, "--max-mb", "2", "--", launch, "-n", "2", "--",
                           program, "many", "60000"], capture_output=True, text=True, timeout=240)
    expect(run2.returncode == 0, f"the second capped run exits 0 (got {run2.returncode})")
    same = subprocess.run([lockstep, "check", wider, "--baseline", base], capture_output=True, text=True, timeout=120)
    expect(same.returncode == 0 and "matches baseline" in same.stdout and "on the collectives both hold" in same.stdout,
           f"two capped runs of the same schedule match on the collectives both hold (exit {same.returncode}): "
           f"{same.stdout[-800:]}")
    expect("compared #" in same.stdout, "check says which collectives it compared")
    # A longer run (70,000 collectives against the baseline's 60,000): a different schedule,
    # though its window shares collectives with the baseline's (before: "matches").
    longer = os.path.join(work, "longer")
    run3 = subprocess.run([lockstep, "run", "-o", longer, "--max-mb", "1", "--", launch, "-n", "2", "--",
                           program, "many", "70000"], capture_output=True, text=True, timeout=240)
    expect(run3.returncode == 0, f"the longer capped run exits 0 (got {run3.returncode})")
    more = subprocess.run([lockstep, "check", longer, "--baseline", base], capture_output=True, text=True, timeout=120)
    expect(more.returncode == 3 and "issued 60000 collectives, this run 70000" in more.stdout
           and "schedule matches baseline" not in more.stdout,
           f"a run that issued more collectives differs from the baseline (exit {more.returncode}): {more.stdout[-800:]}")
    # A baseline from a short uncapped run (50 collectives) against the capped run's 60,000: differs.
    short = os.path.join(work, "short")
    subprocess.run([lockstep, "run", "-o", short, "--", launch, "-n", "2", "--", program, "many", "50"],
                   capture_output=True, text=True, timeout=120)
    short_base = os.path.join(work, "short.baseline")
    subprocess.run([lockstep, "check", short, "--write-baseline", short_base], capture_output=True, text=True,
                   timeout=120)
    junit = os.path.join(work, "none.xml")
    none = subprocess.run([lockstep, "check", trace, "--baseline", short_base, "--junit", junit], capture_output=True,
                          text=True, timeout=120)
    expect(none.returncode == 3 and "issued 50 collectives, this run 60000" in none.stdout
           and "schedule matches baseline" not in none.stdout,
           f"a baseline of another length: differs, not a match (exit {none.returncode}): {none.stdout[-800:]}")
    # Every output says so: no line calls the run clean, and the JUnit file fails with the exit code.
    expect(not none.stdout.startswith("lockstep check: clean"), f"not announced clean: {none.stdout[:300]}")
    xml = open(junit).read()
    expect('failures="0"' not in xml and 'name="matches_baseline"' in xml and "schedule differs" in xml,
           f"JUnit fails matches_baseline when the schedule differs: {xml[-800:]}")
    # A changed collective inside the common window is a difference (exit 3).
    changed = os.path.join(work, "changed.baseline")
    lines = text.splitlines()
    for i, l in enumerate(lines):
        if l.startswith("  ") and "all_reduce" in l:
            lines[i] = l.replace("all_reduce", "all_gather", 1)
            break
    open(changed, "w").write("\n".join(lines) + "\n")
    diff = subprocess.run([lockstep, "check", trace, "--baseline", changed], capture_output=True, text=True,
                          timeout=120)
    expect(diff.returncode == 3 and "differs from baseline" in diff.stdout,
           f"a changed collective in the common window differs (exit {diff.returncode}): {diff.stdout[-800:]}")

    # A checkpoint that does not match the ops its file holds: the file is inconsistent, and
    # the verdict can no longer be clean.
    tampered = os.path.join(work, "tampered")
    shutil.copytree(trace, tampered)
    victim = sorted(os.path.join(tampered, f) for f in os.listdir(tampered) if f.endswith(".lockstep.sqlite"))[1]
    db = sqlite3.connect(victim)
    db.execute("UPDATE checkpoints SET digest = digest + 1 WHERE ordinal = (SELECT max(ordinal) FROM checkpoints)")
    db.commit()
    db.close()
    bad = subprocess.run([lockstep, "check", tampered], capture_output=True, text=True, timeout=120)
    expect(bad.returncode == 4, f"a tampered checkpoint makes check incomplete (exit {bad.returncode})")
    expect("does not match the collectives it holds" in bad.stdout, "the inconsistent file is named")
    expect("known by digest only" not in bad.stdout,
           "nothing is claimed proven by digest when a member's digests are inconsistent")
finally:
    shutil.rmtree(work, ignore_errors=True)

finish()
