#!/usr/bin/env python3
"""Every thread lockstep attach stopped runs again even when lockstep is killed mid-attach:
SIGKILL (the kernel detaches a dead tracer's tracees), SIGTERM and SIGINT (lockstep detaches,
then dies of the signal). Thirty attaches of the hung Python program (3 threads), each killed
after a random delay; after each, no thread is left in a ptrace stop ('t'), nobody traces the
program, no signal is pending, and the spinning thread keeps running.

usage: killed_attach_test.py LOCKSTEP PYTHON FIXTURE_LIB_DIR"""
import os
import random
import signal
import subprocess
import sys
import time

from attach_checks import expect, finish, proc_state, wait_until

lockstep, python, fixture = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, LD_LIBRARY_PATH=fixture + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
p = subprocess.Popen([python, os.path.join(here, "hung_ctypes_program.py")], env=env, stdout=subprocess.PIPE,
                     text=True, start_new_session=True)


def thread_states(pid):
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                out[int(t)] = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            pass
    return out


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


try:
    expect(p.stdout.readline().strip() == "ready", "the program runs")
    rng = random.Random(1234)
    stuck, killed_mid = [], 0
    for i in range(30):
        sig = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT][i % 3]
        a = subprocess.Popen([lockstep, "attach", str(p.pid), "--ras-timeout", "1"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 0.3))
        a.send_signal(sig)
        rc = a.wait()
        killed_mid += rc == -sig
        released = wait_until(10, lambda: proc_state(p.pid)["tracer"] == "0" and "t" not in thread_states(p.pid).values())
        if not released:
            stuck.append((i, sig, thread_states(p.pid), proc_state(p.pid)))
    print(f"{killed_mid} of 30 attaches died of the signal (the others had finished)")
    expect(killed_mid > 0, "some attaches were killed while they ran")
    expect(stuck == [], f"no thread left stopped or traced after a killed attach: {stuck}")
    st = proc_state(p.pid)
    expect(st is not None and st["sigpnd"] == "0000000000000000" and st["shdpnd"] == "0000000000000000",
           "no signal pending in the program")
    t0 = cpu_ticks(p.pid)
    expect(wait_until(10, lambda: cpu_ticks(p.pid) > t0), "the spinning thread still runs")
    expect(p.poll() is None, "the program is alive")
finally:
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
finish()
