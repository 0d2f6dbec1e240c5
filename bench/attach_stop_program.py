"""A process shaped like a hung PyTorch rank for `lockstep attach` stop-time measurements:
N threads (default 24) in the states such a process has: futex waits (Event.wait, a queue's
get), pure-Python CPU loops, timed sleeps, and one thread blocked in a native wait under a
Python caller (ctypes -> poll(2) on a pipe nobody writes: the stand-in for an NCCL/CUDA wait).
Prints "ready PID" once every thread is in place, then runs until killed (10 minutes at most, so
a forgotten one does not keep loading the machine).
    python3 bench/attach_stop_program.py [THREADS]"""
import ctypes
import os
import queue
import sys
import threading
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
stop = threading.Event()
started = threading.Barrier(n + 1)
q = queue.Queue()
libc = ctypes.CDLL(None, use_errno=True)
rd, wr = os.pipe()


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def nested(depth, leaf):
    return leaf() if depth == 0 else nested(depth - 1, leaf)


def futex_event():
    started.wait()
    nested(6, lambda: stop.wait())


def futex_queue():
    started.wait()
    nested(4, q.get)


def cpu_loop():
    started.wait()
    x = 0
    while not stop.is_set():
        x = nested(3, lambda: sum(i * i for i in range(200)))


def sleeper():
    started.wait()
    while not stop.is_set():
        nested(2, lambda: time.sleep(0.05))


def collective_wait():
    fd = PollFd(rd, 1, 0)
    started.wait()
    nested(8, lambda: libc.poll(ctypes.byref(fd), 1, -1))


kinds = [futex_event, futex_queue, cpu_loop, sleeper]
threads = [threading.Thread(target=collective_wait, name="collective", daemon=True)]
threads += [threading.Thread(target=kinds[i % len(kinds)], name=f"w{i}", daemon=True) for i in range(n - 1)]
for t in threads:
    t.start()
started.wait()
print("ready", os.getpid(), flush=True)
threading.Event().wait(600)
