"""A Python program that hangs inside the CPU NCCL, reached through ctypes: rank 0 of a
2-rank communicator whose rank 1 never comes (ncclCommInitRank waits for it). Two more
threads: one sleeping (no GIL), one spinning in Python (it holds the GIL). Prints "ready" once
they all run. The attach test reads its frames from outside."""
import ctypes
import sys
import threading
import time


def spinner_loop():
    x = 0
    while True:
        x += 1


def sleeper_wait():
    while True:
        time.sleep(1000)


class UniqueId(ctypes.Structure):  # ncclUniqueId: passed by value
    _fields_ = [("internal", ctypes.c_char * 128)]


def hang_in_nccl(nccl):
    uid = UniqueId()
    rc = nccl.ncclGetUniqueId(ctypes.byref(uid))
    if rc != 0:
        sys.exit(f"ncclGetUniqueId: {rc}")
    comm = ctypes.c_void_p()
    print("ready", flush=True)
    nccl.ncclCommInitRank(ctypes.byref(comm), 2, uid, 0)  # rank 1 never joins: hangs here


def main():
    nccl = ctypes.CDLL("libnccl.so.2")
    nccl.ncclCommInitRank.argtypes = [ctypes.c_void_p, ctypes.c_int, UniqueId, ctypes.c_int]
    threading.Thread(target=spinner_loop, daemon=True).start()
    threading.Thread(target=sleeper_wait, daemon=True).start()
    hang_in_nccl(nccl)


if __name__ == "__main__":
    main()
