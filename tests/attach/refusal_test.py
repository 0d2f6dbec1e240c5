#!/usr/bin/env python3
"""lockstep attach refuses, with the reason and the fix, a process it may not ptrace: here one
already traced by its parent (PTRACE_TRACEME), as under gdb or py-spy. Nothing is stopped; the
refused rank counts as without snapshot (exit 4, never clean); --no-native still reads the
process (no ptrace needed).

usage: refusal_test.py LOCKSTEP"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

from attach_checks import expect, finish, proc_state, wait_until

lockstep = sys.argv[1]
PTRACE_TRACEME = 0
r, w = os.pipe()
child = os.fork()
if child == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    ok = libc.ptrace(PTRACE_TRACEME, 0, None, None) == 0
    os.write(w, b"y" if ok else b"n")
    while True:
        time.sleep(1000)
try:
    expect(os.read(r, 1) == b"y", "the child is traced by its parent")
    wait_until(10, lambda: proc_state(child)["state"] == "S")  # asleep, as it stays
    before = proc_state(child)
    res = subprocess.run([lockstep, "attach", str(child), "--json"], capture_output=True, text=True, timeout=60)
    print(res.stderr)
    expect(res.returncode == 4, f"exit 4 (a rank not read), got {res.returncode}")
    expect(f"already traced by PID {os.getpid()}" in res.stderr, "the reason names the tracer")
    expect("fix: detach that tracer" in res.stderr, "the fix is given")
    rep = json.loads(res.stdout)
    expect(rep["ranks"][0]["snapshot"] is False and "already traced" in rep["ranks"][0]["error"],
           "the report keeps the refusal for that process")
    expect(proc_state(child) == before, "the child is unchanged")
    nn = subprocess.run([lockstep, "attach", str(child), "--no-native", "--json"], capture_output=True, text=True,
                        timeout=60)
    rep = json.loads(nn.stdout)
    expect(rep["ranks"][0]["snapshot"] is True and rep["ranks"][0]["python_status"].startswith("CPython"),
           f"--no-native reads it anyway: {rep['ranks'][0].get('python_status')}")
    # No process at all: PID 0 and -1 (which kill(2) reads as groups) are usage errors, not ranks.
    for bad in ("0", "-1"):
        res = subprocess.run([lockstep, "attach", "--", bad], capture_output=True, text=True, timeout=60)
        expect(res.returncode == 2 and "not in range 1" in res.stderr, f"attach {bad}: exit 2, got {res.returncode}")
finally:
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
finish()
