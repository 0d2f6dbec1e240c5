"""The seed scenario in PyTorch: FSDP2 (fully_shard) + Ulysses context-parallel attention.

q, k, v go through `torch.distributed.nn.functional.all_to_all_single` (seq -> head), attention
runs on a head shard over the full sequence, and the output comes back (head -> seq). FSDP2
reduce-scatters each layer's gradients from its post_backward hook.

--broken  reproduces the seed's ordering divergence deterministically. In the seed, the compiled
          backward issued a layer's Ulysses all-to-all before FSDP's post_backward reduce-scatter
          of the layer above on some ranks and after it on others. Here rank 1 (and every odd
          rank) defers one FSDP post_backward until the next Ulysses backward all-to-all has been
          issued, at step --diverge-step: rank 0 then sits in reduce_scatter (FSDP post_backward)
          while rank 1 sits in all_to_all (Ulysses backward) at the same sequence number.
--fixed   the seed's fix: the Ulysses exchanges run under torch._dynamo.disable (eager, on the
          autograd engine's path, like FSDP's hooks). Only meaningful with --compile.
--compile compile each layer with torch.compile.

Runs with torchrun (`torchrun --nproc-per-node 2 fsdp_ulysses.py --broken`) or srun; world size 1
works (no divergence is possible with one rank).
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
import torch.nn as nn
import torch.nn.functional as F

ARGS = None


def _all_to_all_seq_to_head(x, group):
    """[B, S/W, H, D] -> [B, S, H/W, D]"""
    w = dist.get_world_size(group)
    b, s, h, d = x.shape
    x = x.reshape(b, s, w, h // w, d).permute(2, 0, 1, 3, 4).contiguous()
    out = dist_nn.all_to_all_single(torch.empty_like(x), x, group=group)
    return out.permute(1, 0, 2, 3, 4).reshape(b, w * s, h // w, d)


def _all_to_all_head_to_seq(x, group):
    """[B, S, H/W, D] -> [B, S/W, H, D]"""
    w = dist.get_world_size(group)
    b, s_full, h, d = x.shape
    s = s_full // w
    x = x.reshape(b, w, s, h, d).permute(1, 0, 2, 3, 4).contiguous()
    out = dist_nn.all_to_all_single(torch.empty_like(x), x, group=group)
    return out.permute(1, 2, 0, 3, 4).reshape(b, s, w * h, d)


class _AfterUlyssesBackward(torch.autograd.Function):
    """Identity whose backward runs right after the Ulysses all-to-all backward that consumes
    its output's gradient: the point where --broken releases the deferred FSDP post_backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        REORDER.release()
        return g


class RankDependentReorder:
    """Emulates the compiled backward's rank-dependent order (see module docstring)."""

    def __init__(self):
        self.armed = False
        self.deferred = None
        self.installed = False

    def install(self):
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg
        original = pg.FSDPParamGroup.post_backward
        reorder = self

        def post_backward(group, *args, **kwargs):
            if reorder.armed and reorder.deferred is None:
                reorder.armed = False
                reorder.deferred = lambda: original(group, *args, **kwargs)
                return None
            return original(group, *args, **kwargs)

        pg.FSDPParamGroup.post_backward = post_backward
        self.installed = True

    def release(self):
        if self.deferred is not None:
            run, self.deferred = self.deferred, None
            run()


REORDER = RankDependentReorder()


class UlyssesAttention(nn.Module):
    def __init__(self, dim, heads, group):
        super().__init__()
        self.heads, self.group = heads, group
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, dim = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, dim // self.heads).unbind(2)
        if REORDER.installed:
            q = _AfterUlyssesBackward.apply(q)
        seq_to_head, head_to_seq = ULYSSES
        q, k, v = (seq_to_head(t, self.group) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True).transpose(1, 2)
        o = head_to_seq(o.contiguous(), self.group)
        return self.out(o.reshape(b, s, dim))


class Block(nn.Module):
    def __init__(self, dim, heads, group):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = UlyssesAttention(dim, heads, group)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


ULYSSES = (_all_to_all_seq_to_head, _all_to_all_head_to_seq)


def main():
    global ARGS, ULYSSES
    ap = argparse.ArgumentParser()
    ap.add_argument("--broken", action="store_true")
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--diverge-step", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512, help="global sequence length")
    ap.add_argument("--timeout-s", type=float, default=0,
                    help="process-group timeout (NCCL watchdog), 0 = torch's default; a short one "
                         "makes a hung run end with Flight Recorder dumps")
    ARGS = ap.parse_args()
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", 0)))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    kw = {}
    if ARGS.timeout_s > 0:
        import datetime
        kw["timeout"] = datetime.timedelta(seconds=ARGS.timeout_s)
    dist.init_process_group("nccl", device_id=dev, **kw)
    world = dist.get_world_size()
    group = dist.group.WORLD  # FSDP and Ulysses share one process group, as in the seed

    if ARGS.fixed:
        ULYSSES = (torch._dynamo.disable(_all_to_all_seq_to_head),
                   torch._dynamo.disable(_all_to_all_head_to_seq))
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(ARGS.dim, ARGS.heads, group) for _ in range(ARGS.layers)]).to(dev)
    from torch.distributed.fsdp import fully_shard
    for blk in model:
        # Params stay unsharded between forward and backward: the backward then issues only
        # Ulysses all-to-alls and FSDP reduce-scatters, the two streams the seed interleaved.
        fully_shard(blk, reshard_after_forward=False)
        if ARGS.compile:
            blk.compile()
    fully_shard(model, reshard_after_forward=False)
    if ARGS.broken and rank % 2 == 1:
        REORDER.install()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    s_local = ARGS.seq // world
    for step in range(ARGS.steps):
        torch.manual_seed(100 + step * world + rank)
        x = torch.randn(2, s_local, ARGS.dim, device=dev)
        if REORDER.installed and step == ARGS.diverge_step:
            REORDER.armed = True
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
