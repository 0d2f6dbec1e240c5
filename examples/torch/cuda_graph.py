"""A step with collectives captured into a CUDA graph and replayed K times.

NCCL is called once per op at capture; the ops run at every replay. lockstep must record the
captured ops (state 'captured') and one executed op per replay (state 'graph_launched'), so the
per-communicator sequence counts what ran. Prints the expected numbers as JSON on the last line.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist


def captured_step(x, y):
    # At world size 1 an in-place all_reduce launches nothing; this kernel keeps the graph
    # non-empty (the collectives are still recorded and counted at every replay).
    x.mul_(1.0)
    dist.all_reduce(x)
    dist.all_reduce(y)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=5)
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", 0))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    x = torch.ones(256, device=dev)
    y = torch.ones(64, device=dev, dtype=torch.float16)
    dist.all_reduce(x)                   # eager warm-up (also creates the communicator)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            captured_step(x, y)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(args.replays):
        g.replay()
    torch.cuda.synchronize()
    dist.all_reduce(x)                   # eager op after the replays
    torch.cuda.synchronize()
    world = dist.get_world_size()
    dist.destroy_process_group()
    print(json.dumps({"eager_ops": 2, "captured_ops": 2, "replays": args.replays,
                      "executed_seq_expected": 2 + 2 * args.replays, "world": world}))


if __name__ == "__main__":
    main()
