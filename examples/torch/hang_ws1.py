"""A real-NCCL job made to hang at world size 1 (for `lockstep attach` on one GPU; DESIGN.md):
the current stream is held by cuStreamWaitValue32_v2 on a device word nobody sets, then
collectives are issued (ProcessGroupNCCL's stream waits for the current stream, so they queue
behind the wait), and the host blocks at the next synchronize, forever. Prints "hung" first.

  python hang_ws1.py [--collectives N]"""
import argparse
import ctypes
import os

import torch
import torch.distributed as dist


def hold_stream(stream, word):
    cuda = ctypes.CDLL("libcuda.so.1")
    fn = cuda.cuStreamWaitValue32_v2  # the unversioned export is the old API (801)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    rc = fn(ctypes.c_void_p(stream.cuda_stream), ctypes.c_uint64(word.data_ptr()), 1, 0)  # GEQ 1
    if rc != 0:
        raise SystemExit(f"cuStreamWaitValue32_v2: CUDA error {rc}")


def issue_collectives(x, n):
    for _ in range(n):
        dist.all_reduce(x)
    dist.all_gather_into_tensor(torch.empty_like(x), x)


def wait_for_step(x):
    torch.cuda.synchronize()  # the host blocks here
    return x.sum().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collectives", type=int, default=3)
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29571")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)  # the communicator exists and works
    torch.cuda.synchronize()
    word = torch.zeros(1, dtype=torch.int32, device="cuda")
    hold_stream(torch.cuda.current_stream(), word)
    issue_collectives(x, a.collectives)
    print("hung", flush=True)
    wait_for_step(x)


if __name__ == "__main__":
    main()
