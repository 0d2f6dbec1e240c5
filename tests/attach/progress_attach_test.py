#!/usr/bin/env python3
"""lockstep attach on a job that makes progress (the fixed seed, 2 ranks over lockstep-launch on
the CPU NCCL, a long run): its ranks wait in cuStreamSynchronize most of the time and their RAS
counts differ for a moment, but one instant proves no hang. Every attach looks twice
(--confirm-ms): the RAS counts grew in between, so the job is making progress, exit 0, never a
hang or a divergence. With one look only (--confirm-ms 0) nothing is proven hung (exit 0 or 4,
never 1). An unwritable -o DIR is refused before anything is stopped.

usage: progress_attach_test.py LOCKSTEP LOCKSTEP_LAUNCH SEED_DEADLOCK FIXTURE_LIB_DIR"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from attach_checks import expect, finish, free_port, wait_until, stop_job

lockstep, launch, seed, fixture = sys.argv[1:5]
env = dict(os.environ, LD_LIBRARY_PATH=fixture + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
env["NCCL_RAS_ADDR"] = f"127.0.0.1:{free_port()}"
job = subprocess.Popen([launch, "-n", "2", "--timeout", "170", "--", seed, "--fixed", "--steps", "20000"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
try:
    def kids():
        try:
            return [int(p) for p in open(f"/proc/{job.pid}/task/{job.pid}/children").read().split()]
        except OSError:
            return []
    expect(wait_until(60, lambda: len(kids()) == 2), "the launcher has 2 rank processes")
    time.sleep(6)  # past the plan and NCCL init: collectives run, RAS answers
    codes, verdicts = [], []
    for _ in range(4):
        r = subprocess.run([lockstep, "attach", "--tree", str(job.pid), "--json", "--confirm-ms", "500"],
                           capture_output=True, text=True, timeout=120)
        codes.append(r.returncode)
        rep = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
        verdicts.append(rep.get("verdict", r.stderr[-300:]))
        expect(rep.get("second_look", {}).get("ras_moved") is True and rep.get("divergences") == [],
               f"RAS counts moved between the looks, no divergence: {rep.get('second_look')}")
    print("\n".join(verdicts))
    expect(job.poll() is None, "the job still runs")
    expect(codes == [0] * 4, f"a job making progress exits 0 every time: {codes}")
    expect(all("making progress" in v for v in verdicts), "the verdict says the job is making progress")
    one = subprocess.run([lockstep, "attach", "--tree", str(job.pid), "--confirm-ms", "0"], capture_output=True,
                         text=True, timeout=120)
    expect(one.returncode in (0, 4) and "the job hangs" not in one.stdout,
           f"one look only never proves a hang: exit {one.returncode}, {one.stdout[:300]}")
    # -o DIR that cannot be written: refused before any stop (no "stopped" line printed).
    blocked = os.path.join(tempfile.mkdtemp(prefix="lockstep-attach-ro-"), "file")
    open(blocked, "w").close()
    ro = subprocess.run([lockstep, "attach", "--tree", str(job.pid), "-o", os.path.join(blocked, "sub")],
                        capture_output=True, text=True, timeout=60)
    expect(ro.returncode == 2 and "nothing was stopped" in ro.stderr and " stopped " not in ro.stderr.replace("nothing was stopped", ""),
           f"unwritable -o: exit 2 before any stop: {ro.returncode} {ro.stderr[-300:]}")
finally:
    stop_job(job)
finish()
