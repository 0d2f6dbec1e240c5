"""Writes PyTorch Flight Recorder dumps of a small, known schedule (world size 1 or more).

Every rank issues all_reduce, broadcast, all_gather, reduce_scatter, all_to_all_single (even and
uneven splits), send/recv with its neighbour (world > 1), a coalesced all_reduce pair, and a
collective on a second process group ("tp"), then dumps its Flight Recorder ring:

  --out DIR       pickle: DIR/<prefix><rank>       (what the watchdog writes on a timeout)
                  JSON:   DIR/<prefix><rank>.json
  --watchdog S    process-group timeout S seconds and a GPU sleep far longer: NCCL's watchdog
                  times out and torch itself writes the dumps (TORCH_FR_DUMP_TEMP_FILE), then
                  aborts the process; nothing is dumped by this script.
  --inflight      first park the stream behind a long GPU sleep, issue the collectives, and dump
                  while they are still scheduled/started, not completed.
  --p2p-self      at world size 1, the batched send/recv goes to the rank itself (torch's
                  batch_isend_irecv path: how it numbers collectives around a p2p batch)

Runs under torchrun / srun, or alone (world size 1).
"""
import argparse
import os

import torch
import torch.distributed as dist


def schedule(dev, rank, world, tp, p2p_self=False):
    x = torch.ones(1024, device=dev)
    dist.all_reduce(x)
    dist.broadcast(x, src=0)
    out = torch.empty(1024 * world, device=dev)
    dist.all_gather_into_tensor(out, x)
    rs = torch.empty(1024 // world if 1024 % world == 0 else 1, device=dev)
    dist.reduce_scatter_tensor(rs, torch.ones(rs.numel() * world, device=dev))
    a2a_in = torch.arange(world * 8, dtype=torch.float32, device=dev)
    dist.all_to_all_single(torch.empty_like(a2a_in), a2a_in)
    splits = [8 + (i % 2) for i in range(world)]
    uneven_in = torch.ones(sum(splits), device=dev)
    dist.all_to_all_single(torch.empty(sum(splits), device=dev), uneven_in,
                           output_split_sizes=splits, input_split_sizes=splits)
    if world > 1 or p2p_self:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        buf = torch.empty(16, device=dev)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(16, device=dev), nxt),
                                       dist.P2POp(dist.irecv, buf, prv)])
        for r in reqs:
            r.wait()
    y = torch.ones(64, device=dev)
    z = torch.ones(32, device=dev)  # allreduce_coalesced wants one dtype
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(y)
        dist.all_reduce(z)
    cm.wait()
    dist.all_reduce(torch.ones(256, dtype=torch.float16, device=dev), op=dist.ReduceOp.MAX, group=tp)


def dump(out, prefix, rank):
    os.makedirs(out, exist_ok=True)
    from torch._C._distributed_c10d import _dump_nccl_trace
    with open(os.path.join(out, f"{prefix}{rank}"), "wb") as f:
        f.write(_dump_nccl_trace(includeCollectives=True, includeStackTraces=True, onlyActive=False))
    try:
        from torch._C._distributed_c10d import _dump_nccl_trace_json
        js = _dump_nccl_trace_json(includeCollectives=True, onlyActive=False)
        print(f"JSON dump: {type(js).__name__} of {len(js)}", flush=True)
        if js:
            jdir = out.rstrip("/") + "-json"
            os.makedirs(jdir, exist_ok=True)
            with open(os.path.join(jdir, f"{prefix}{rank}.json"), "w" if isinstance(js, str) else "wb") as f:
                f.write(js)
    except Exception as e:  # older torch
        print("no JSON dump:", repr(e), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefix", default="nccl_trace_rank_")
    ap.add_argument("--inflight", action="store_true")
    ap.add_argument("--watchdog", type=float, default=0)
    ap.add_argument("--p2p-self", action="store_true")
    a = ap.parse_args()
    rank = int(os.environ.get("RANK", 0))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29571"))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    kw = {}
    if a.watchdog > 0:
        import datetime
        kw["timeout"] = datetime.timedelta(seconds=a.watchdog)
    dist.init_process_group("nccl", device_id=dev, **kw)
    world = dist.get_world_size()
    tp = dist.new_group(list(range(world)), group_desc="tp")
    dist.all_reduce(torch.ones(1, device=dev))  # warm up the communicators
    torch.cuda.synchronize()
    if a.inflight:
        torch.cuda._sleep(int(3e9))  # ~seconds of GPU time ahead of the collectives
    if a.watchdog > 0:
        torch.cuda._sleep(int(2e11))  # minutes of GPU time: the collectives behind it time out
        schedule(dev, rank, world, tp)
        import time
        time.sleep(10 * a.watchdog + 60)  # the watchdog dumps and aborts the process first
        return
    schedule(dev, rank, world, tp, a.p2p_self)
    if not a.inflight:
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
    dump(a.out, a.prefix, rank)
    torch.cuda.synchronize()
    print(f"rank {rank}: dumped to {a.out}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
