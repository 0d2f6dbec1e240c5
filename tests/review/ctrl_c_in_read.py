# Review 2026-12-02, finding L2 (docs/review-2026-12-02.md), by hand: Ctrl-C (SIGINT) to a
# Python main thread blocked in os.read, after an NCCL call (the stub NCCL of tests/recorder).
#   python3 ctrl_c_in_read.py build/tests/recorder/stub-lib                 # after 0.3 s
#   LD_PRELOAD=build/lib/liblockstep.so python3 ctrl_c_in_read.py build/tests/recorder/stub-lib
#                                                     # reviewed code: after 3.3 s (the safety byte)
# Exit 0 when the KeyboardInterrupt came at once (< 2 s), 1 otherwise.
import ctypes, os, signal, threading, time, sys
nccl = ctypes.CDLL(sys.argv[1] + "/libnccl.so.2")
comm = ctypes.c_void_p()
class Uid(ctypes.Structure):
    _fields_ = [("b", ctypes.c_char * 128)]
uid = Uid()
assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
r, w = os.pipe()
main = threading.get_ident()
def poke():
    time.sleep(0.3); signal.pthread_kill(main, signal.SIGINT)
    time.sleep(3); os.write(w, b"x")
threading.Thread(target=poke, daemon=True).start()
t0 = time.time()
try:
    os.read(r, 1)
    print("read returned after %.1f s: Ctrl-C was held back until then" % (time.time() - t0))
    sys.exit(1)
except KeyboardInterrupt:
    print("KeyboardInterrupt after %.1f s" % (time.time() - t0))
    sys.exit(0 if time.time() - t0 < 2 else 1)
