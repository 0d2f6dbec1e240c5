#!/usr/bin/env python3
"""lockstep attach on a hung Python program that reaches the CPU NCCL through ctypes
(hung_ctypes_program.py, run by the interpreter under test): every Python thread's frames read
from outside, with file, function and line; the GIL holder is the spinning thread; the main
thread waits in ncclCommInitRank called from hang_in_nccl; the program is unchanged afterwards.

usage: python_attach_test.py LOCKSTEP PYTHON FIXTURE_LIB_DIR"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from attach_checks import expect, finish, proc_state, wait_until

lockstep, python, fixture = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
program = os.path.join(here, "hung_ctypes_program.py")
env = dict(os.environ, LD_LIBRARY_PATH=fixture + ":" + os.environ.get("LD_LIBRARY_PATH", ""),
           LOCKSTEP_FIXTURE_INIT_TIMEOUT_S="600", PYTHONDONTWRITEBYTECODE="1")
env.pop("PYTHONPATH", None)
p = subprocess.Popen([python, program], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
snapdir = None
try:
    expect(p.stdout.readline().strip() == "ready", "the program started its threads and entered NCCL")
    wait_until(10, lambda: proc_state(p.pid) is not None and len(proc_state(p.pid)["threads"]) >= 3)
    before = proc_state(p.pid)
    # "ready" is printed just before the ncclCommInitRank call, and the spinner holds the GIL the
    # main thread needs to get there: on a loaded machine an attach can come first. Attach again
    # (a few times, half a second apart) until the main thread is in the call.
    for attempt in range(10):
        r = subprocess.run([lockstep, "attach", str(p.pid), "--json", "--ras-timeout", "1"], capture_output=True,
                           text=True, timeout=120)
        rep = json.loads(r.stdout) if r.stdout.strip() else {}
        where = (rep.get("ranks") or [{}])[0].get("python_where", "")
        if where.endswith("hang_in_nccl"):
            break
        time.sleep(0.5)
    print(r.stderr)
    # the snapshot itself, for the per-thread Python frames
    snapdir = tempfile.mkdtemp(prefix="lockstep-attach-py-")
    subprocess.run([lockstep, "attach", str(p.pid), "-o", snapdir, "--ras-timeout", "1"], capture_output=True,
                   text=True, timeout=120)
    snap = json.load(open(os.path.join(snapdir, [f for f in os.listdir(snapdir) if f.endswith(".attach.json")][0])))
    proc = snap["processes"][0]
    print("python:", proc["python_status"])
    expect(proc["python_status"].startswith("CPython 3."), f"the interpreter was found: {proc['python_status']}")
    threads = proc["threads"]
    py = [t for t in threads if t["has_python"]]
    expect(len(py) == 3, f"3 Python threads read: {[t['tid'] for t in py]}")
    def funcs(t):
        return [f["function"] for f in t["python"]]
    main = [t for t in py if "hang_in_nccl" in funcs(t)]
    spin = [t for t in py if "spinner_loop" in funcs(t)]
    sleep = [t for t in py if "sleeper_wait" in funcs(t)]
    expect(len(main) == 1 and main[0]["tid"] == p.pid, "the main thread's frames: hang_in_nccl")
    expect(len(spin) == 1 and len(sleep) == 1, "the spinner's and the sleeper's frames")
    if main:
        f0 = main[0]["python"][0]
        src = open(program).read().splitlines()
        expect(f0["function"] == "hang_in_nccl" and f0["file"] == program, f"innermost frame hang_in_nccl in the program: {f0}")
        expect(0 < f0["line"] <= len(src) and "ncclCommInitRank" in src[f0["line"] - 1],
               f"its line is the ncclCommInitRank call: {f0['line']}")
        expect(funcs(main[0])[-1] == "<module>" and "main" in funcs(main[0]), f"the chain reaches <module>: {funcs(main[0])}")
        natives = [f["function"] for f in main[0]["native"]]
        expect(any(n.lstrip("p").startswith("ncclCommInitRank") for n in natives),
               f"the main thread's native stack is inside ncclCommInitRank: {natives[:12]}")
    expect([t["tid"] for t in threads if t["gil_holder"]] == [t["tid"] for t in spin], "the GIL holder is the spinner")
    expect(rep.get("ranks") and rep["ranks"][0].get("python_where", "").endswith("hang_in_nccl"),
           f"the report says where its Python waits: {rep.get('ranks', [{}])[0].get('python_where')}")
    after = proc_state(p.pid)
    expect(after is not None and p.poll() is None, "the program still runs")
    if after:
        expect(after["tracer"] == "0" and after["sigpnd"] == before["sigpnd"] and after["shdpnd"] == before["shdpnd"]
               and after["threads"] == before["threads"], f"unchanged: {before} -> {after}")
finally:
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    if snapdir:
        shutil.rmtree(snapdir, ignore_errors=True)
finish()
