"""Host-side cost per collective and step time, to compare runs with and without lockstep.

Run once per configuration (no preload; lockstep with stacks none/native/python; PyTorch's
Flight Recorder via TORCH_FR_BUFFER_SIZE). Prints one JSON line. scripts/gpu-check.sh runs the
matrix and scripts/gpu/overhead_table.py turns the lines into a Markdown table.

per_call_us: median over --repeats of (time to issue --calls 8-byte all_reduces, then
             synchronize) / --calls. Issue-bound: an 8-byte all_reduce at world size 1 is a tiny
             kernel, so this is the host path PyTorch + NCCL (+ recorder) take per call.
step_ms:     median step time of a small MLP training loop with one all_reduce per parameter
             tensor per step (DDP-like, no bucketing).
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def per_call_us(dev, calls, repeats):
    t = torch.ones(2, device=dev)  # 8 bytes
    for _ in range(200):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples), samples


def step_ms(dev, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 1024, device=dev)
    times = []
    for i in range(steps + 5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(x).pow(2).mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        if i >= 5:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    med, samples = per_call_us(dev, args.calls, args.repeats)
    st = step_ms(dev, args.steps)
    dist.destroy_process_group()
    print(json.dumps({"label": args.label, "per_call_us": round(med, 3),
                      "per_call_min_us": round(min(samples), 3),
                      "per_call_max_us": round(max(samples), 3),
                      "step_ms": round(st, 3), "calls": args.calls, "repeats": args.repeats,
                      "preload": os.environ.get("LD_PRELOAD", ""),
                      "stacks": os.environ.get("LOCKSTEP_STACKS", ""),
                      "fr_buffer": os.environ.get("TORCH_FR_BUFFER_SIZE", "")}))


if __name__ == "__main__":
    main()
