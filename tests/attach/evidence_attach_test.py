#!/usr/bin/env python3
"""lockstep attach folds the job's own evidence into its verdict, on the hung seed (2 ranks over
lockstep-launch on the CPU NCCL):

  fr        the job's environment names a Flight Recorder prefix (TORCH_FR_DUMP_TEMP_FILE). Dumps
            there older than the job are another job's: named, not read. Dumps the job wrote
            (written after it started; synthetic, tests/flightrec/make_dumps.py: rank 1 issues
            all_to_all where rank 0 issues reduce_scatter at seq 3) are read: the verdict names
            that first divergence as proven by Flight Recorder entries, each rank's evidence lists
            flight_recorder (proven), nccl_ras (proven) and its stack (inferred); `--from` gives
            the same; `--fr DIR` reads dumps the environment does not name.
  recorder  the job runs under `lockstep run` (LOCKSTEP_DIR in its environment): attach reads the
            recorder's rows, the verdict names the first divergence at seq 3750 as proven by them.

usage: evidence_attach_test.py MODE LOCKSTEP LOCKSTEP_LAUNCH SEED_DEADLOCK FIXTURE_LIB_DIR MAKE_DUMPS"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from attach_checks import expect, finish, free_port, proc_state, wait_until, stop_job

mode, lockstep, launch, seed, fixture, make_dumps = sys.argv[1:7]
work = tempfile.mkdtemp(prefix=f"lockstep-attach-{mode}-")
env = dict(os.environ, LD_LIBRARY_PATH=fixture + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
env["NCCL_RAS_ADDR"] = f"127.0.0.1:{free_port()}"
fr_dir = os.path.join(work, "fr")
prefix = os.path.join(fr_dir, "nccl_trace_rank_")


def dumps(out, *args):
    subprocess.run([sys.executable, make_dumps, out, "--ranks", "2", *args], check=True)


def attach(*args):
    r = subprocess.run([lockstep, "attach", *args], capture_output=True, text=True, timeout=120)
    print(r.stderr)
    try:
        rep = json.loads(r.stdout)
    except ValueError:
        rep = {}
        print(r.stdout)
    print(json.dumps({k: rep.get(k) for k in ("verdict", "traces", "stale_fr_dumps")}, indent=1))
    return r.returncode, rep


def sources(rep, rank):
    for x in rep.get("ranks", []):
        if x["rank"] == rank:
            return {(e["source"], e["level"]) for e in x.get("evidence_sources", [])}
    return set()


cmd = [launch, "-n", "2", "--timeout", "170", "--", seed]
if mode == "fr":
    env["TORCH_FR_DUMP_TEMP_FILE"] = prefix
    dumps(fr_dir)  # an earlier job's dumps at the same prefix: clean ones
    old = time.time() - 3600
    for f in os.listdir(fr_dir):
        os.utime(os.path.join(fr_dir, f), (old, old))
else:
    trace = os.path.join(work, "trace")
    cmd = [lockstep, "run", "-o", trace, "--stacks", "none", "--hang-timeout", "2", "--"] + cmd
job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       start_new_session=True)
lines = []
threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True).start()
try:
    hung = wait_until(120, lambda: sum("then waiting for it" in l for l in lines) == 2)
    expect(hung, "both ranks reached their last op (the seed hangs at op 3750)")
    snap = os.path.join(work, "snap")
    if mode == "fr":
        rc, rep = attach("--tree", str(job.pid), "--json")
        expect(sorted(os.path.basename(f) for f in rep.get("stale_fr_dumps", [])) ==
               ["nccl_trace_rank_0", "nccl_trace_rank_1"], "dumps older than the job are named as another job's")
        expect(rep.get("traces") == [], f"and not read: {rep.get('traces')}")
        expect(rc == 1 and "Flight Recorder" not in rep.get("verdict", ""), "the verdict does not use them")
        # The job's own dumps (as torch writes them while the job runs).
        shutil.rmtree(fr_dir)
        dumps(fr_dir, "--diverge-rank", "1", "--diverge-seq", "3")
        rc, rep = attach("--tree", str(job.pid), "-o", snap, "--json")
        expect(rc == 1, f"attach exits 1, got {rc}")
        tr = rep.get("traces", [])
        expect(len(tr) == 1 and tr[0]["kind"] == "flight_recorder" and tr[0]["read"],
               "one Flight Recorder source, read")
        if tr:
            expect(tr[0]["found_by"].startswith("TORCH_FR_DUMP_TEMP_FILE of "), f"found by the environment: {tr[0]['found_by']}")
            expect(sorted(tr[0]["ops_per_rank"]) == ["0", "1"], f"entries of ranks 0 and 1: {tr[0]['ops_per_rank']}")
            expect(tr[0]["verdict"] == "divergent" and 1 in tr[0]["divergence_ranks"], "FR proves a divergence, rank 1 in it")
        v = rep.get("verdict", "")
        expect("first divergence" in v and "proven: Flight Recorder entries" in v,
               "the verdict names the first divergence and that FR entries prove it")
        expect("proven: NCCL RAS counts" in v, "and keeps the RAS count divergence")
        for k in (0, 1):
            s = sources(rep, k)
            expect({("flight_recorder", "proven"), ("nccl_ras", "proven"), ("stack", "inferred")} <= s,
                   f"rank {k}'s evidence: FR and RAS proven, stack inferred: {s}")
        t = subprocess.run([lockstep, "attach", "--from", snap], capture_output=True, text=True, timeout=60)
        expect(t.returncode == 1 and "Flight Recorder entries at " in t.stdout and "flight_recorder proven" in t.stdout,
               "attach --from DIR reads the same dumps, the text names them per rank")
        # A hostile dump among them (a pickle that would run a command): skipped by its own path,
        # the other rank's entries still read.
        shutil.rmtree(fr_dir)
        dumps(fr_dir, "--hostile-rank", "1")
        pwned = "/tmp/lockstep-fr-pwned"
        if os.path.exists(pwned):
            os.unlink(pwned)
        rc, rep = attach("--from", snap, "--json")
        tr = rep.get("traces", [])
        expect(len(tr) == 1 and tr[0]["read"] and list(tr[0]["ops_per_rank"]) == ["0"],
               "with a hostile dump: rank 0's entries read")
        expect(len(tr) == 1 and len(tr[0]["skipped"]) == 1 and tr[0]["skipped"][0].startswith(prefix + "1: "),
               f"the hostile dump skipped, named by its own path: {tr[0]['skipped'] if tr else None}")
        expect(not os.path.exists(pwned), "and nothing in it ran")
        # Dumps gone (or on another node): named as not read, never silently dropped.
        shutil.rmtree(fr_dir)
        rc, rep = attach("--from", snap, "--json")
        tr = rep.get("traces", [])
        expect(len(tr) == 1 and not tr[0]["read"] and "readable here" in tr[0]["error"],
               "dumps no longer readable: the source is named, not read, and why")
        expect("not read" in rep.get("verdict", "") and rc == 1, "the verdict says so (RAS still proves the divergence)")
        # --fr: dumps the environment does not name.
        other = os.path.join(work, "given")
        dumps(other, "--diverge-rank", "0", "--diverge-seq", "2")
        kids = [int(p) for p in open(f"/proc/{job.pid}/task/{job.pid}/children").read().split()]
        rc, rep = attach(str(kids[0]), "--fr", other, "--no-native", "--json")
        given = [x for x in rep.get("traces", []) if x["found_by"] == "--fr"]
        expect(len(given) == 1 and given[0]["read"] and given[0]["verdict"] == "divergent",
               "--fr DIR: read, its divergence found")
    else:
        wait_until(30, lambda: os.path.isdir(trace) and len([f for f in os.listdir(trace) if f.endswith(".sqlite")]) >= 2)
        time.sleep(3)  # the hang timeout (2 s) flushes the rows
        rc, rep = attach("--tree", str(job.pid), "-o", snap, "--json")
        expect(rc == 1, f"attach exits 1, got {rc}")
        tr = rep.get("traces", [])
        expect(len(tr) == 1 and tr[0]["kind"] == "recorder" and tr[0]["read"], "one recorder source, read")
        if tr:
            expect(os.path.realpath(tr[0]["path"]) == os.path.realpath(trace), f"the job's trace dir: {tr[0]['path']}")
            expect(tr[0]["found_by"].startswith("LOCKSTEP_DIR of "), f"found by LOCKSTEP_DIR: {tr[0]['found_by']}")
            expect("seq 3750" in tr[0]["summary"], f"the recorder's first divergence is at seq 3750: {tr[0]['summary']}")
        v = rep.get("verdict", "")
        expect("seq 3750" in v and "proven: lockstep recorder rows" in v, "the verdict names seq 3750, proven by the rows")
        for k in (0, 1):
            s = sources(rep, k)
            expect({("recorder", "proven"), ("stack", "inferred")} <= s, f"rank {k}'s evidence: recorder proven: {s}")
    expect(job.poll() is None, "the job still runs (hangs) after the attaches")
finally:
    stop_job(job)
shutil.rmtree(work, ignore_errors=True)
finish()
