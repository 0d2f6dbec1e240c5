"""What the attach tests share: named checks that all run, then one exit status; helpers to read
a live process's state from /proc and to pick a free TCP port for NCCL_RAS_ADDR."""
import os
import signal
import socket
import subprocess
import sys
import time

failures = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def finish():
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


def free_port():
    """A port nobody listens on now, for this test's own NCCL_RAS_ADDR (concurrent tests differ)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def proc_state(pid):
    """What must be the same before and after an attach: alive, run state, no tracer, no pending
    signal, the same threads."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        status = {}
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                status[k] = v.strip()
        threads = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None
    return {"state": state, "tracer": status.get("TracerPid"), "sigpnd": status.get("SigPnd"),
            "shdpnd": status.get("ShdPnd"), "threads": threads}


def wait_until(seconds, cond):
    end = time.time() + seconds
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def stop_job(job):
    """Ends a job started in its own process group: SIGTERM, then SIGKILL after 20 s."""
    os.killpg(job.pid, signal.SIGTERM)
    try:
        job.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
