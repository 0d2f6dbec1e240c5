"""A program that reaches NCCL the way vLLM's and SGLang's pynccl do: ctypes.CDLL on the path of
libnccl.so.2 (RTLD_LOCAL) and calls through that handle; CUDA through ctypes on libcuda.so.1.

  pynccl_ctypes.py --nccl PATH --rank R --nranks N --id-file F [--steps K] [--diverge-at S]
                   [--device D] [--host-buffers]

Rank 0 writes the ncclUniqueId to --id-file; the others wait for it. Each step all-reduces a
float32 buffer and checks the sum. --diverge-at S: the last rank all-reduces one element more at
step S (a rank-dependent divergence, as a bug in a model's sharding would make). On a real GPU,
buffers come from cuMemAlloc; with --host-buffers (the CPU NCCL fixture) they are host arrays.
Exit code 0 when every checked all-reduce was right; 3 when an NCCL call failed.
"""
import argparse
import ctypes
import os
import sys
import time

NCCL_FLOAT32 = 7
NCCL_SUM = 0


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def check(what, rc):
    if rc != 0:
        sys.stderr.write("pynccl_ctypes: %s returned %d\n" % (what, rc))
        sys.exit(3)


class Cuda:
    def __init__(self, device):
        self.lib = ctypes.CDLL("libcuda.so.1")
        check("cuInit", self.lib.cuInit(0))
        dev = ctypes.c_int()
        check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(dev), device))
        ctx = ctypes.c_void_p()
        check("cuDevicePrimaryCtxRetain",
              self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        check("cuCtxSetCurrent", self.lib.cuCtxSetCurrent(ctx))
        self.stream = ctypes.c_void_p()
        check("cuStreamCreate", self.lib.cuStreamCreate(ctypes.byref(self.stream), 1))

    def sync(self):
        check("cuStreamSynchronize", self.lib.cuStreamSynchronize(self.stream))


class PyNcclCommunicator:
    """The shape of vLLM's PyNcclCommunicator: a library wrapper, then calls through it."""

    def __init__(self, path, rank, nranks, id_file, cuda):
        self.nccl = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        self.cuda = cuda
        self.rank = rank
        uid = NcclUniqueId()
        if rank == 0:
            check("ncclGetUniqueId", self.nccl.ncclGetUniqueId(ctypes.byref(uid)))
            tmp = id_file + ".tmp"
            with open(tmp, "wb") as f:
                f.write(bytes(bytearray(uid.internal)))
            os.rename(tmp, id_file)
        else:
            deadline = time.time() + 60
            while not os.path.exists(id_file):
                if time.time() > deadline:
                    sys.exit("pynccl_ctypes: no unique id in %s" % id_file)
                time.sleep(0.01)
            with open(id_file, "rb") as f:
                ctypes.memmove(ctypes.byref(uid), f.read(128), 128)
        self.comm = ctypes.c_void_p()
        self.nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                               NcclUniqueId, ctypes.c_int]
        check("ncclCommInitRank",
              self.nccl.ncclCommInitRank(ctypes.byref(self.comm), nranks, uid, rank))
        self.nccl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                            ctypes.c_void_p]

    def all_reduce(self, send, recv, count):
        nccl, comm, stream = self.nccl, self.comm, self.cuda.stream
        rc = nccl.ncclAllReduce(send, recv, count, NCCL_FLOAT32, NCCL_SUM, comm, stream)  # MARK:nccl_call
        check("ncclAllReduce", rc)

    def destroy(self):
        check("ncclCommDestroy", self.nccl.ncclCommDestroy(self.comm))


def run_step(comm, bufs, count):
    comm.all_reduce(bufs.send, bufs.recv, count)  # MARK:issue


class HostBuffers:
    def __init__(self, cuda, n):
        self.n = n
        self.send = (ctypes.c_float * n)()
        self.recv = (ctypes.c_float * n)()

    def fill(self, value):
        for i in range(self.n):
            self.send[i] = value

    def first(self):
        return self.recv[0]


class DeviceBuffers:
    def __init__(self, cuda, n):
        self.cuda, self.n = cuda, n
        self.send, self.recv = ctypes.c_void_p(), ctypes.c_void_p()
        check("cuMemAlloc", cuda.lib.cuMemAlloc_v2(ctypes.byref(self.send), n * 4))
        check("cuMemAlloc", cuda.lib.cuMemAlloc_v2(ctypes.byref(self.recv), n * 4))

    def fill(self, value):
        host = (ctypes.c_float * self.n)(*([value] * self.n))
        check("cuMemcpyHtoD", self.cuda.lib.cuMemcpyHtoD_v2(self.send, host, self.n * 4))

    def first(self):
        host = (ctypes.c_float * 1)()
        check("cuMemcpyDtoH", self.cuda.lib.cuMemcpyDtoH_v2(host, self.recv, 4))
        return host[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nccl", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--id-file", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--diverge-at", type=int, default=-1)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--host-buffers", action="store_true")
    a = ap.parse_args()
    cuda = Cuda(a.device)
    comm = PyNcclCommunicator(a.nccl, a.rank, a.nranks, a.id_file, cuda)
    count = 64
    bufs = (HostBuffers if a.host_buffers else DeviceBuffers)(cuda, count + 1)
    for step in range(a.steps):
        bufs.fill(float(a.rank + 1))
        n = count + 1 if (step == a.diverge_at and a.rank == a.nranks - 1) else count
        run_step(comm, bufs, n)
        cuda.sync()
        want = a.nranks * (a.nranks + 1) / 2.0
        if a.diverge_at < 0 and bufs.first() != want:
            sys.exit("pynccl_ctypes: step %d: got %r, want %r" % (step, bufs.first(), want))
    comm.destroy()
    print("pynccl_ctypes: rank %d done, %d all_reduce" % (a.rank, a.steps))


if __name__ == "__main__":
    main()
