"""Every PyTorch collective lockstep must see, at any world size (the GPU check runs it at 1).

Each call site is a function of its own, so the trace's Python frames can be checked against
`--expect FILE`: a JSON list of {op, dtype, count, function, line} in issue order, which
scripts/gpu/check_trace.py compares with the recorded trace.
"""
import argparse
import inspect
import json
import os

import torch
import torch.distributed as dist

EXPECT = []


def expect(op, dtype, count, depth=1, skip_reason=None):
    """Remember what the caller is about to issue and from which line."""
    frame = inspect.stack()[depth]
    EXPECT.append({"op": op, "dtype": dtype, "count": count,
                   "function": frame.function, "line": frame.lineno + 1,
                   "skip_reason": skip_reason})


def do_all_reduce(dev, n):
    t = torch.ones(n, device=dev)
    expect("all_reduce", "float32", n)
    dist.all_reduce(t)
    return t


def do_broadcast(dev, n):
    t = torch.arange(n, device=dev, dtype=torch.float16)
    expect("broadcast", "float16", n)
    dist.broadcast(t, src=0)


def do_all_gather(dev, n, world):
    inp = torch.ones(n, device=dev, dtype=torch.bfloat16)
    out = torch.empty(n * world, device=dev, dtype=torch.bfloat16)
    expect("all_gather", "bfloat16", n)
    dist.all_gather_into_tensor(out, inp)


def do_reduce_scatter(dev, n, world):
    inp = torch.ones(n * world, device=dev)
    out = torch.empty(n, device=dev)
    # Seen on torch 2.11: at world size 1 ProcessGroupNCCL copies instead of calling NCCL.
    expect("reduce_scatter", "float32", n,
           skip_reason="PyTorch makes no NCCL call for reduce_scatter_tensor at world size 1"
           if world == 1 else None)
    dist.reduce_scatter_tensor(out, inp)


def do_all_to_all_even(dev, n, world):
    inp = torch.arange(n * world, device=dev, dtype=torch.float32)
    out = torch.empty_like(inp)
    # torch >= 2.x with NCCL >= 2.28 sends equal splits as ncclAlltoAll: count per peer = n
    expect("all_to_all", "float32", n * world)
    dist.all_to_all_single(out, inp)


def do_all_to_all_uneven(dev, world, rank):
    send = [1 + (rank + p) % 3 for p in range(world)]
    recv = [1 + (p + rank) % 3 for p in range(world)]
    inp = torch.ones(sum(send), device=dev, dtype=torch.int32)
    out = torch.empty(sum(recv), device=dev, dtype=torch.int32)
    expect("all_to_all", "int32", sum(send))
    dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)


def do_batch_isend_irecv(dev, n, world, rank):
    peer = (rank + 1) % world
    src = (rank - 1) % world
    s = torch.ones(n, device=dev)
    r = torch.empty(n, device=dev)
    ops = [dist.P2POp(dist.isend, s, peer), dist.P2POp(dist.irecv, r, src)]
    expect("send_recv" if world > 1 else "all_to_all", "float32", n)
    for w in dist.batch_isend_irecv(ops):
        w.wait()


def do_coalesced(dev, n):
    ts = [torch.ones(n, device=dev), torch.ones(2 * n, device=dev)]
    expect("coalesced", "float32", 3 * n)
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()


def do_new_group(dev, n, world):
    g = dist.new_group(ranks=list(range(world)))
    t = torch.ones(n, device=dev)
    expect("all_reduce", "float32", n)
    dist.all_reduce(t, group=g)
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", help="write the expected ops (JSON) here (rank 0)")
    ap.add_argument("--n", type=int, default=1024)
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    # device_id binds the default group to the device: new_group then uses ncclCommSplit.
    dist.init_process_group("nccl", device_id=dev)
    n = args.n
    do_all_reduce(dev, n)
    do_broadcast(dev, n)
    do_all_gather(dev, n, world)
    do_reduce_scatter(dev, n, world)
    do_all_to_all_even(dev, n, world)
    do_all_to_all_uneven(dev, world, rank)
    do_batch_isend_irecv(dev, n, world, rank)
    do_coalesced(dev, n)
    do_new_group(dev, n, world)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    if args.expect and rank == 0:
        with open(args.expect, "w") as f:
            json.dump(EXPECT, f, indent=1)
    print(f"collectives.py rank {rank}: issued {len(EXPECT)} collectives")


if __name__ == "__main__":
    main()
