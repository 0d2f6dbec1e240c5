"""Step time with and without a recorder, resolved to about 1% (issue 15). World size 1, one GPU.

The step (`Model.step`): a 60-layer bf16 MLP trained FSDP+Ulysses style, with per layer 4
parameter all_gathers (forward), 2 all_to_all in the forward and 2 in the backward (Ulysses), 4
gradient reduce_scatters and 1 all_reduce (backward): 60 x 13 - 1 = 779 torch collectives per
step (the first layer's input needs no gradient all_to_all) from nested Python functions and
autograd Functions (Python stacks several frames deep, on the main and the autograd thread). At
world size 1 torch 2.11 makes no NCCL call for reduce_scatter_tensor: 60 x 9 - 1 = 539 reach
NCCL, plus one cudaEventRecord per torch collective (779).

Two ways to compare, both printing one JSON line per timed step:

  --ab lockstep   in-process A/B under LD_PRELOAD=liblockstep.so: blocks of --block steps
                  rotate between --configs (CONFIGS below: "recording", "no-stacks", "native",
                  "no-waits", ... and "paused": lockstep_bench_set_off, NCCL and runtime hooks
                  forward only), in a new random order each round with --shuffle 1; with
                  --profile 1 each step's line carries the recorder's profile counters
                  (ticks of the TSC spent per part, bench_knobs.h); with
                  --settle 1 the first step of each block is not timed (the writer thread
                  finishes the previous block's rows; with --settle 0 --block 1 it does so
                  during the next step, whichever configuration that is). "paused" still pays
                  the hooks' entry (~20 ns per call) and shares the machine with the recorder's
                  idle threads. Not measured in-process: process start, the recorder's start
                  (first call, driver loading, trace file creation) and its exit flush.
  --ab fr         alternating child processes, forked from this one after `import torch` and
                  before CUDA is touched: TORCH_FR_BUFFER_SIZE=--fr-size (2000) in odd children, 0 in even
                  ones (PyTorch reads it once per process; unset means its default, 2,000
                  entries in torch 2.11). --procs children per side; each step's line says how
                  many entries the child's Flight Recorder held (fr_entries).

  --ab four       lockstep and the Flight Recorder side by side, in one alternation (issue 31):
                  child processes as in --ab fr (Flight Recorder on in odd children, 0 entries in
                  even ones; --procs per side, order ABBA), each child under the preloaded
                  recorder stepping "recording" and "paused" in a new random order every pair
                  (--steps pairs). Four arms: neither (off, paused), fr (fr, paused), lockstep
                  (off, recording), both (fr, recording). Lockstep's cost is paired within each
                  process; the Flight Recorder's is between processes (it cannot be switched in
                  one). bench/four_arm.py makes the table.

bench/step_ratio.py turns the lines into ratios with bootstrap 95% intervals.
"""
import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist

LAYERS, HIDDEN, TOKENS = 60, 1024, 6144
# --shape: "host" (the sizes above: ~80 ms, bound by the host's issue rate, so every ns the
# recorder adds per call shows) or "gpu" (hidden 2048, 8192 tokens: the GPU's work takes about
# twice the host's issue time, as in a large training job; the recorder's host cost overlaps),
# or "small" (hidden 512, 2048 tokens: the same 779 collectives per step, a child process of
# the Flight Recorder comparison builds it in a fraction of the time).
SHAPES = {"host": (60, 1024, 6144), "gpu": (60, 2048, 8192), "small": (60, 512, 2048)}


class AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        return out

    @staticmethod
    def backward(ctx, g):
        out = torch.empty_like(g)
        dist.all_to_all_single(out, g.contiguous())
        return out


class GatherParam(torch.autograd.Function):
    """FSDP-style: all_gather the shard in the forward, reduce_scatter its gradient."""

    @staticmethod
    def forward(ctx, shard):
        full = torch.empty(shard.numel() * dist.get_world_size(), dtype=shard.dtype,
                           device=shard.device)
        dist.all_gather_into_tensor(full, shard)
        return full

    @staticmethod
    def backward(ctx, g):
        out = torch.empty(g.numel() // dist.get_world_size(), dtype=g.dtype, device=g.device)
        dist.reduce_scatter_tensor(out, g.contiguous())
        return out


class GradNorm(torch.autograd.Function):
    """Identity in the forward; an all_reduce of a gradient statistic in the backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        s = g.float().pow(2).sum().reshape(1)
        dist.all_reduce(s)
        return g


class Layer(torch.nn.Module):
    def __init__(self, dev):
        super().__init__()
        h = HIDDEN
        mk = lambda *shape: torch.nn.Parameter(torch.randn(*shape, device=dev, dtype=torch.bfloat16).flatten() * 0.02)
        self.w1, self.b1, self.w2, self.b2 = mk(4 * h, h), mk(4 * h), mk(h, 4 * h), mk(h)

    def gather(self):
        h = HIDDEN
        return (GatherParam.apply(self.w1).view(4 * h, h), GatherParam.apply(self.b1),
                GatherParam.apply(self.w2).view(h, 4 * h), GatherParam.apply(self.b2))

    def forward(self, x):
        w1, b1, w2, b2 = self.gather()
        x = AllToAll.apply(x)  # sequence -> heads
        y = torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1))
        y = torch.nn.functional.linear(y, w2, b2)
        y = AllToAll.apply(y)  # heads -> sequence
        return GradNorm.apply(x + y)


class Model:
    def __init__(self, dev):
        torch.manual_seed(0)
        self.layers = [Layer(dev) for _ in range(LAYERS)]
        self.params = [p for l in self.layers for p in l.parameters()]
        self.opt = torch.optim.SGD(self.params, lr=1e-6)
        self.x = torch.randn(TOKENS, HIDDEN, device=dev, dtype=torch.bfloat16)

    def step(self):
        y = self.x
        for layer in self.layers:
            y = layer(y)
        y.float().pow(2).mean().backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def timed_step(model):
    """(step ms, host issue ms): the second is until the step's last call returned."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.step()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3, (t1 - t0) * 1e3


GC_OFF = False


def warm(model, n):
    for _ in range(n):
        timed_step(model)
    gc.collect()
    gc.freeze()  # the model's objects: not rescanned by every collection
    if GC_OFF:
        gc.disable()  # no collection lands inside one arm's step and not the other's


def setup():
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=dev)
    return dev


# bench_knobs.h: the parts each configuration switches off (lockstep_bench_set_off).
OFF = {"recorder": 1 << 0, "stack": 1 << 1, "event": 1 << 4, "queue": 1 << 5, "watchdog": 1 << 6,
       "waits": 1 << 7, "memop": 1 << 8, "python": 1 << 9, "unwind": 1 << 10, "pyguard": 1 << 11,
       "profile": 1 << 12, "unwindcap": 1 << 13, "covering": 1 << 14, "donerows": 1 << 17,
       "waitrow": 1 << 18, "waitclock": 1 << 19, "waitindex": 1 << 20,
       "stackmemo": 1 << 21, "pycache": 1 << 22, "adopt": 1 << 23}
CONFIGS = {
    "recording": 0,                                   # the stack mode the process runs with
    "no-stacks": OFF["stack"],
    "native": OFF["python"],                          # python mode: native frames only
    "python-no-unwind": OFF["unwind"],                # python mode: Python frames only
    "full-unwind": OFF["unwindcap"],                  # python mode: every native frame (as before)
    "python-exact-guard": OFF["pyguard"],             # Python frames: exact guard, no code watcher
    "no-waits": OFF["waits"],                         # runtime calls forwarded, not recorded
    "no-rows": OFF["queue"] | OFF["waits"],           # as recording, but no row reaches the writer
    # The writer idle: every hook does its work but pushes no row (op, waits or completion).
    "writer-idle": OFF["queue"] | OFF["waitrow"] | OFF["donerows"],
    "no-completion": OFF["event"],                    # no completion tracking: the watchdog idles
    "no-query": OFF["watchdog"],                      # the watchdog queries no event (no driver calls)
    "no-wait-rows": OFF["waitrow"],                   # runtime calls: call index and clock, no row
    "event-signal": OFF["memop"],                     # completion by event
    # In a LOCKSTEP_COMPLETION=covering process (where "recording" is the covering signal):
    "event-per-op": OFF["covering"],                  # an event after every op (the default signal)
    "no-stacks-event": OFF["stack"] | OFF["covering"],
    "no-memo": OFF["stackmemo"],                      # every native stack unwound (no memo)
    "py-walk": OFF["pycache"],                        # Python frames by the walk (no thread stack cache)
    "own-event": OFF["adopt"],                        # our own event after every op (no adoption)
    "paused": OFF["recorder"] | OFF["waits"],         # NCCL and runtime hooks forward only
}
# BenchCounter order (bench_knobs.h); the TSC follows the last one.
COUNTERS = ["ops", "op_begin_ticks", "op_end_ticks", "stacks", "unwind_ticks", "unwind_frames",
            "python_ticks", "python_frames", "submit_ticks", "submits", "waits", "wait_ticks",
            "event_ticks", "event_record_ticks", "capture_ticks", "row_push_ticks", "unwinds",
            "settle_ticks", "settle_queries"]


class ThreadTimes:
    """Per-thread CPU time and run-queue wait (/proc/self/task/*/schedstat: ns on a CPU, ns
    runnable but waiting for one, timeslices), summed per thread name over one step. The main
    thread is "main"; names are read once per thread."""

    def __init__(self):
        self.names = {}
        self.ok = os.path.exists(f"/proc/self/task/{os.getpid()}/schedstat")

    def snap(self):
        out = {}
        if not self.ok:
            return out
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    run, wait, slices = (int(x) for x in f.read().split()[:3])
                name = self.names.get(tid)
                if name is None:
                    with open(f"/proc/self/task/{tid}/comm") as f:
                        name = "main" if int(tid) == os.getpid() else f.read().strip()
                    self.names[tid] = name
                out[tid] = (name, run, wait, slices)
            except (OSError, ValueError):
                continue  # a thread that ended meanwhile
        return out

    @staticmethod
    def diff(before, after):
        """{name: [run µs, wait µs, timeslices]} for the threads that ran during the step."""
        by = {}
        for tid, (name, run, wait, slices) in after.items():
            _, r0, w0, s0 = before.get(tid, (name, 0, 0, 0))
            if run - r0 <= 0 and wait - w0 <= 0:
                continue
            acc = by.setdefault(name, [0.0, 0.0, 0])
            acc[0] += (run - r0) / 1e3
            acc[1] += (wait - w0) / 1e3
            acc[2] += slices - s0
        return {k: [round(v[0], 1), round(v[1], 1), v[2]] for k, v in by.items()}


def counters_reader(lib):
    """A function returning the recorder's profile counters (dict), or None on builds without."""
    import ctypes
    try:
        f = lib.lockstep_bench_counters
    except AttributeError:
        return None
    f.argtypes, f.restype = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint], ctypes.c_uint
    n = len(COUNTERS) + 1
    buf = (ctypes.c_uint64 * n)()
    # The library says how many counters it keeps; the TSC follows them (an older build keeps
    # fewer: the missing ones read 0).
    have = min(int(f(buf, n)), len(COUNTERS))

    def read():
        f(buf, n)
        out = dict(zip(COUNTERS, list(buf[:have]) + [0] * (len(COUNTERS) - have)))
        out["tsc"] = buf[have]
        return out
    return read


def ab_lockstep(args, emit):
    import ctypes
    import random
    lib = ctypes.CDLL(None)
    set_off = lib.lockstep_bench_set_off  # exported by the preloaded recorder
    set_off.argtypes, set_off.restype = [ctypes.c_uint], ctypes.c_uint
    read = counters_reader(lib) if args.profile else None
    extra = OFF["profile"] if read else 0
    configs = [(c, CONFIGS[c] | extra) for c in args.configs.split(",")]
    model = Model(setup())
    warm(model, args.warmup)
    threads = ThreadTimes() if args.threads else None
    rng = random.Random(15)
    deadline = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")
    for pair in range(args.pairs):
        if time.monotonic() > deadline:
            break
        order = list(configs)
        if args.shuffle:
            rng.shuffle(order)  # a new order every round: no configuration always follows another
        else:
            order = [configs[(k + pair) % len(configs)] for k in range(len(configs))]
        for name, mask in order:
            set_off(mask)
            if args.settle:
                timed_step(model)  # untimed: the previous block's background work settles
            for _ in range(args.block - args.settle):
                t_before = threads.snap() if threads else None
                before = read() if read else None
                ms, issue = timed_step(model)
                rec = {"pair": pair, "config": name, "ms": ms, "issue_ms": issue}
                if before:
                    after = read()
                    rec["counters"] = {k: after[k] - before[k] for k in after}
                if t_before is not None:
                    rec["threads"] = ThreadTimes.diff(t_before, threads.snap())
                emit(rec)
    set_off(0)
    dist.destroy_process_group()


def child(args, config, pair, out):
    # Unset is not off: torch 2.11 keeps a 2,000-entry Flight Recorder by default (the children
    # of 2026-12-01's cost session 4 dumped 2,000 entries with the variable unset). 0 asks for
    # none; each child reports the entries it actually holds (fr_entries).
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(args.fr_size) if config == "fr" else "0"
    model = Model(setup())
    warm(model, args.warmup)
    ms = [timed_step(model) for _ in range(args.steps)]
    entries = fr_entries()
    with open(out, "a") as f:
        for m, issue in ms:
            f.write(json.dumps({"pair": pair, "config": config, "ms": m, "issue_ms": issue,
                                "fr_entries": entries}) + "\n")
    dist.destroy_process_group()


def fr_entries():
    """Entries in this process's Flight Recorder buffer (evidence that it recorded), or None."""
    try:
        import pickle
        dump = pickle.loads(torch._C._distributed_c10d._dump_nccl_trace())
        return len(dump.get("entries", []))
    except Exception:  # noqa: BLE001 -- an API that moved: no evidence either way
        return None


def ab_fr(args, emit):
    import tempfile
    out = tempfile.mktemp(prefix="step-fr-", suffix=".jsonl")
    assert not torch.cuda.is_initialized()
    deadline = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")
    for pair in range(args.procs):
        if time.monotonic() > deadline:
            break
        for config in (("fr", "off") if pair % 2 == 0 else ("off", "fr")):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    child(args, config, pair, out)
                except BaseException as e:  # noqa: BLE001 -- report, never hang the parent
                    print(f"child {config} {pair}: {e!r}", file=sys.stderr)
                    code = 1
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            if status != 0:
                print(f"child {config} {pair} exited with status {status}", file=sys.stderr)
            # Emitted child by child: a run stopped by a time limit keeps what it measured.
            if os.path.exists(out):
                with open(out) as f:
                    for line in f:
                        emit(json.loads(line))
                os.unlink(out)


def four_child(args, fr, proc, out):
    import ctypes
    import random
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(args.fr_size) if fr else "0"
    set_off = ctypes.CDLL(None).lockstep_bench_set_off  # the preloaded recorder
    set_off.argtypes, set_off.restype = [ctypes.c_uint], ctypes.c_uint
    model = Model(setup())
    warm(model, args.warmup)
    rng = random.Random(31 + proc)
    lines = []
    for pair in range(args.steps):
        order = [("recording", 0), ("paused", CONFIGS["paused"])]
        rng.shuffle(order)
        for name, mask in order:
            set_off(mask)
            ms, issue = timed_step(model)
            lines.append({"proc": proc, "pair": pair, "fr": fr, "lockstep": name, "ms": ms,
                          "issue_ms": issue})
    set_off(0)
    entries = fr_entries()
    with open(out, "a") as f:
        for rec in lines:
            rec["fr_entries"] = entries
            f.write(json.dumps(rec) + "\n")
    dist.destroy_process_group()


def ab_four(args, emit):
    import tempfile
    out = tempfile.mktemp(prefix="step-four-", suffix=".jsonl")
    assert not torch.cuda.is_initialized()
    deadline = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")
    proc = 0
    for pair in range(args.procs):
        for fr in ((True, False) if pair % 2 == 0 else (False, True)):
            if time.monotonic() > deadline:
                return
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    four_child(args, fr, proc, out)
                except BaseException as e:  # noqa: BLE001 -- report, never hang the parent
                    print(f"child {proc} fr={fr}: {e!r}", file=sys.stderr)
                    code = 1
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            if status != 0:
                print(f"child {proc} fr={fr} exited with status {status}", file=sys.stderr)
            proc += 1
            if os.path.exists(out):
                with open(out) as f:
                    for line in f:
                        emit(json.loads(line))
                os.unlink(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ab", choices=["lockstep", "fr", "four"], required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--pairs", type=int, default=40, help="lockstep: block pairs")
    ap.add_argument("--block", type=int, default=3, help="lockstep: steps per block")
    ap.add_argument("--seconds", type=float, default=0,
                    help="stop starting pairs after this long (0: run --pairs / --procs)")
    ap.add_argument("--settle", type=int, choices=[0, 1], default=1,
                    help="lockstep: 1 = the first step of each block is not timed")
    ap.add_argument("--configs", default="recording,no-stacks,paused",
                    help="lockstep: configurations rotated (" + ", ".join(CONFIGS) + ")")
    ap.add_argument("--shuffle", type=int, choices=[0, 1], default=0,
                    help="lockstep: 1 = the configurations' order drawn anew every round")
    ap.add_argument("--profile", type=int, choices=[0, 1], default=0,
                    help="lockstep: 1 = recorder profile counters per step (bench_knobs.h)")
    ap.add_argument("--threads", type=int, choices=[0, 1], default=0,
                    help="lockstep: 1 = each thread's CPU time and run-queue wait per step "
                         "(/proc/self/task/*/schedstat, read outside the timed step)")
    ap.add_argument("--procs", type=int, default=10, help="fr: children per side")
    ap.add_argument("--steps", type=int, default=20,
                    help="fr: timed steps per child; four: step pairs per child")
    ap.add_argument("--fr-size", type=int, default=2000, help="fr: TORCH_FR_BUFFER_SIZE when on")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="host")
    ap.add_argument("--gc", choices=["on", "off"], default="on",
                    help="off: Python's cyclic GC disabled after warm-up (a collection costs "
                         "milliseconds and lands in either arm's step at random: noise, not cost)")
    args = ap.parse_args()
    global LAYERS, HIDDEN, TOKENS, GC_OFF
    GC_OFF = args.gc == "off"
    LAYERS, HIDDEN, TOKENS = SHAPES[args.shape]
    label = args.label or args.ab
    emit = lambda rec: print(json.dumps({"label": label, **rec}), flush=True)
    {"lockstep": ab_lockstep, "fr": ab_fr, "four": ab_four}[args.ab](args, emit)


if __name__ == "__main__":
    main()
