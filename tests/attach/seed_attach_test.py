#!/usr/bin/env python3
"""lockstep attach on the hung seed (examples/seed_deadlock, 2 ranks over lockstep-launch on the
CPU NCCL, not recorded): the stacks say where each rank's host waits (cuStreamSynchronize, after
the collective that hangs), the fixture's NCCL RAS says which collective each rank enqueued last
(rank 0 one ReduceScatter more than rank 1), the verdict names that divergence as proven by RAS,
exit 1; the ranks are the same afterwards (alive, same state and threads, no tracer, no pending
signal) and still hang.

usage: seed_attach_test.py LOCKSTEP LOCKSTEP_LAUNCH SEED_DEADLOCK FIXTURE_LIB_DIR"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from attach_checks import expect, finish, free_port, proc_state, wait_until, stop_job

lockstep, launch, seed, fixture = sys.argv[1:5]
work = tempfile.mkdtemp(prefix="lockstep-attach-seed-")
env = dict(os.environ, LD_LIBRARY_PATH=fixture + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
env["NCCL_RAS_ADDR"] = f"127.0.0.1:{free_port()}"
job = subprocess.Popen([launch, "-n", "2", "--timeout", "170", "--", seed], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, start_new_session=True)
lines = []
threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True).start()
try:
    hung = wait_until(120, lambda: sum("then waiting for it" in l for l in lines) == 2)
    expect(hung, "both ranks reached their last op (the seed hangs at op 3750)")
    kids = [int(p) for p in open(f"/proc/{job.pid}/task/{job.pid}/children").read().split()]
    expect(len(kids) == 2, f"the launcher has 2 rank processes: {kids}")
    # Let the hang settle: each rank's host blocks in the synchronize after its last op.
    wait_until(10, lambda: all(proc_state(k) and proc_state(k)["state"] == "S" for k in kids))
    before = {k: proc_state(k) for k in kids}
    out = os.path.join(work, "snap")
    r = subprocess.run([lockstep, "attach", "--tree", str(job.pid), "-o", out, "--json"], capture_output=True,
                       text=True, timeout=120)
    print(r.stderr)
    expect(r.returncode == 1, f"attach exits 1 (a divergence found), got {r.returncode}")
    rep = json.loads(r.stdout)
    print(json.dumps({k: rep[k] for k in ("verdict", "divergences", "no_snapshot")}, indent=1))
    expect(any("stopped" in l and "ms" in l for l in r.stderr.splitlines()), "the stop time of each process is printed")
    ranks = {x["rank"]: x for x in rep["ranks"]}
    expect(sorted(ranks) == [0, 1], f"ranks 0 and 1 read: {sorted(ranks)}")
    for k in (0, 1):
        x = ranks.get(k, {})
        expect(x.get("snapshot") is True, f"rank {k} has a snapshot")
        expect(x.get("waits_in") in ("cuStreamSynchronize", "cuStreamSynchronize_v2"),
               f"rank {k}'s host waits in cuStreamSynchronize: {x.get('waits_in')}")
        expect(x.get("called_from") == "main", f"rank {k}'s wait is called from main: {x.get('called_from')}")
        expect(x.get("evidence") == "proven", f"rank {k}'s evidence is proven (RAS counts): {x.get('evidence')}")
    div = rep["divergences"]
    expect(len(div) == 1 and div[0]["collective"] == "ReduceScatter",
           f"one count divergence, on ReduceScatter: {[d['collective'] for d in div]}")
    if div:
        counts = {r: c["count"] for c in div[0]["counts"] for r in c["ranks"]}
        expect(counts.get(0, 0) == counts.get(1, 0) + 1,
               f"rank 0 enqueued one ReduceScatter more than rank 1: {counts}")
        expect({"waiter": 0, "waits_for": 1} in div[0]["wait_for"], "the wait-for edge: rank 0 waits for rank 1")
        expect(div[0]["evidence"] == "proven" and div[0]["source"] == "nccl_ras", "the divergence is proven by NCCL RAS")
    expect("ReduceScatter" in rep["verdict"] and "proven: NCCL RAS" in rep["verdict"],
           "the verdict names the collective and what proves it")
    expect(rep["no_snapshot"] == [], "no rank without a snapshot")
    snaps = [f for f in os.listdir(out) if f.endswith(".attach.json")]
    expect(len(snaps) == 1, f"one node snapshot written: {snaps}")
    # The text report reads the same snapshot back.
    t = subprocess.run([lockstep, "attach", "--from", out], capture_output=True, text=True, timeout=60)
    expect(t.returncode == 1 and "Verdict: the ranks diverged" in t.stdout, "attach --from DIR gives the same verdict")
    # No frame is named by a symbol it lies past the end of (the nearest exported symbol below an
    # address in a stripped library is often unrelated code): its size from the ELF file.
    sizes = {}
    def symbol_size(module, name):
        if module not in sizes:
            sizes[module] = {}
            for flag in ("--dynamic", "--syms"):
                r = subprocess.run(["readelf", "-W", flag, module], capture_output=True, text=True)
                for line in r.stdout.splitlines():
                    f = line.split()
                    if len(f) >= 8 and f[0].endswith(":") and f[2].isdigit():
                        sizes[module].setdefault(f[7].split("@")[0], int(f[2]))
        return sizes[module].get(name)
    named = past = 0
    if shutil.which("readelf"):
        for pr in json.load(open(os.path.join(out, snaps[0]))).get("processes", []):
            for th in pr.get("threads", []):
                for fr in th.get("native", []):
                    fn, mod = fr.get("function"), fr.get("module")
                    if not fn or not mod or not os.path.exists(mod) or "(" in fn or "::" in fn:
                        continue
                    size = symbol_size(mod, fn)
                    if size:
                        named += 1
                        past += fr.get("function_offset", 0) >= size
        expect(named > 0 and past == 0, f"{named} frames named by a symbol whose size readelf gives, {past} past its end")
    # A second attach into the same directory: --from reads the newest attach's snapshot only and
    # names the other (two attaches are never one job); PIDs with --from are a usage error.
    r2 = subprocess.run([lockstep, "attach", "--tree", str(job.pid), "-o", out, "--no-native"], capture_output=True,
                        text=True, timeout=120)
    snaps2 = [f for f in os.listdir(out) if f.endswith(".attach.json")]
    t2 = subprocess.run([lockstep, "attach", "--from", out, "--json"], capture_output=True, text=True, timeout=60)
    rep2 = json.loads(t2.stdout) if t2.stdout.strip().startswith("{") else {}
    expect(len(snaps2) == 2 and "holds snapshots of another attach, left out: " + snaps[0] in t2.stderr
           and len(rep2.get("ranks", [])) == 2,
           f"--from reads the newest of two attaches only: {snaps2}, {len(rep2.get('ranks', []))} ranks, "
           f"{t2.stderr.strip()[-300:]}")
    t3 = subprocess.run([lockstep, "attach", "--from", out, str(kids[0])], capture_output=True, text=True, timeout=60)
    expect(t3.returncode == 2 and "--from DIR reads snapshots already taken" in t3.stderr, f"PIDs with --from: exit {t3.returncode}")
    # The target unchanged: alive, same state and threads, no tracer left, no signal pending.
    after = {k: proc_state(k) for k in kids}
    for k in kids:
        expect(after[k] == before[k], f"pid {k} unchanged by the attach: {before[k]} -> {after[k]}")
    expect(job.poll() is None, "the job still runs (hangs) after the attach")
finally:
    stop_job(job)
    shutil.rmtree(work, ignore_errors=True)
finish()
