"""GPU machine, real NCCL under LD_PRELOAD=nccl_hook_probe.so: the Python frames seen inside the
NCCL hook for (1) an all-reduce issued from an autograd Function's backward, on the autograd
device thread, and (2) with 2+ ranks (torchrun), FSDP2's reduce-scatter from its post-backward
hook (FSDP2 issues none on 1 rank). Run by tests/python/gpu/run.sh (1 rank) or
  PROBE_OUT=/tmp/p LD_PRELOAD=probe.so torchrun --nproc-per-node 2 torch_nccl_probe.py
Exits non-zero with a message when an expected frame is missing."""
import os
import sys

import torch
import torch.distributed as dist


class Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)  # MARK:backward_all_reduce
        return grad


def mark_line(name):
    with open(__file__) as src:
        for number, text in enumerate(src, 1):
            if text.rstrip().endswith("# MARK:" + name):
                return number
    raise AssertionError("no MARK:" + name)


def parse(path):
    ops, cur = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("op "):
                name, gil, _ = line.split()[1:]
                gil = gil.split("=")[1]
                cur = {"op": name, "gil": gil, "frames": []}
                ops.append(cur)
            else:
                function, file, lineno = line.strip().split("\t")
                cur["frames"].append((function, os.path.basename(file), int(lineno)))
    return ops


def main():
    out = "%s.%d" % (os.environ["PROBE_OUT"], os.getpid())
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    x = torch.ones(64, device="cuda", requires_grad=True)
    Exchange.apply(x).sum().backward()
    torch.cuda.synchronize()

    from torch.distributed.fsdp import fully_shard
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)).cuda()
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    dist.destroy_process_group()

    ops = parse(out)
    for op in ops:
        print("rank %d: %s gil=%s" % (rank, op["op"], op["gil"]),
              ["%s %s:%d" % f for f in op["frames"][:6]])
    failures = []
    me, line = os.path.basename(__file__), mark_line("backward_all_reduce")
    bw = [o for o in ops if o["op"] == "all_reduce" and ("Exchange.backward", me, line) in o["frames"]]
    if not bw:
        failures.append("no all_reduce with the frame Exchange.backward %s:%d" % (me, line))
    elif bw[0]["gil"] != "0":
        failures.append("expected the GIL released inside the hook, PyGILState_Check=%s" % bw[0]["gil"])
    rs = [o for o in ops if o["op"] == "reduce_scatter"]
    if world > 1 and not any(f.endswith("post_backward") for o in rs for f, _, _ in o["frames"]):
        failures.append("no FSDP reduce_scatter with a post_backward frame: %r" % rs[:1])
    for f in failures:
        print("FAIL:", f)
    print("torch NCCL probe:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
