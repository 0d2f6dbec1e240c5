#!/usr/bin/env python3
"""Instructions per NCCL call on the issuing thread, recorder configurations side by side.

Runs bench/nccl_call_overhead.cpp over the CPU fixture (tests/fixture: NCCL over shared memory,
a driver whose events and capture queries are host code) under `valgrind --tool=callgrind`, once
per configuration, and counts the instructions executed inside the program's NCCL calls: the
inclusive cost of the entry points it calls (the recorder's hooks when preloaded, else the
fixture's functions). Instruction counts do not move with the machine's load, unlike ns.

    python3 bench/call_instructions.py [--build build] [--calls 2000] [--rounds 2]
        [--ops allreduce,sendrecv] [--stacks none,native] [--detail N] [--ns PROCESSES]

Columns: instructions per call (per group of ncclSend + ncclRecv for sendrecv) inside the NCCL
entry points; of which the fixture's own NCCL and driver code; what the recorder adds (the rest).
--ns P: also time the same configurations without valgrind, P processes each, alternating
(nccl_call_overhead --mode=plain, 20,000 calls, 5 rounds a process): median ns per call over
the processes' medians (wall time: it moves with the machine's load; the instructions do not).
--detail N: the N liblockstep functions with the most inclusive instructions per call, for each
recorder configuration. Python stacks need a Python program (bench/step_overhead.py on a GPU).
"""
import argparse
import json
import shutil
import os
import re
import subprocess
import sys
import tempfile

ENTRY = {"allreduce": ["ncclAllReduce"],
         "sendrecv": ["ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd"]}
OTHER = re.compile(r"Writer::|_M_run|lambda|Tables::|start|CommInit|comm_created|call_start|"
                   r"Completion::(run|poll|watch)|recorder\(\)")
LINE = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(\*\s+)?(\S.*?):(.+?) \[(.+)\]\s*$")


def build_bench(root, build, out):
    cuda = "/usr/local/cuda"
    cache = os.path.join(build, "CMakeCache.txt")
    if os.path.exists(cache):
        for line in open(cache):
            if line.startswith("LOCKSTEP_CUDA_ROOT:"):
                cuda = line.split("=", 1)[1].strip()
    exe = os.path.join(out, "nccl_call_overhead")
    subprocess.run(["g++", "-std=c++20", "-O2", "-g", f"-I{cuda}/include",
                    os.path.join(root, "bench", "nccl_call_overhead.cpp"), "-o", exe,
                    f"-L{os.path.join(build, 'fixture-lib')}", "-lcuda", "-lnccl", "-ldl",
                    "-lpthread"], check=True)
    return exe


def inclusive(outfile):
    """{(function, object basename): inclusive Ir} from callgrind_annotate."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", outfile],
                          check=True, capture_output=True, text=True).stdout
    costs = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        fn = m.group(4).strip()  # the function (group 3: its source file)
        obj = os.path.basename(m.group(5))
        key = (fn, obj)
        costs[key] = max(costs.get(key, 0), int(m.group(1).replace(",", "")))
    return costs


def run_one(exe, build, lib, op, stacks, calls, rounds, tmp):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(build, "fixture-lib")
    if stacks:
        env["LD_PRELOAD"] = lib
        env["LOCKSTEP_STACKS"] = stacks
        env["LOCKSTEP_DIR"] = os.path.join(tmp, "traces")
    out = os.path.join(tmp, f"cg.{op}.{stacks or 'base'}")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    exe, f"--calls={calls}", f"--rounds={rounds}", "--pause-ms=20", f"--op={op}"],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return inclusive(out)


def time_ns(exe, build, lib, op, stacks, tmp):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(build, "fixture-lib")
    if stacks:
        env["LD_PRELOAD"] = lib
        env["LOCKSTEP_STACKS"] = stacks
        env["LOCKSTEP_DIR"] = os.path.join(tmp, "traces")
    out = subprocess.run([exe, "--calls=20000", "--rounds=5", "--pause-ms=20", f"--op={op}"],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_ns"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ops", default="allreduce,sendrecv")
    ap.add_argument("--stacks", default="none,native")
    ap.add_argument("--detail", type=int, default=0)
    ap.add_argument("--ns", type=int, default=0)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.abspath(a.build)
    lib = os.path.join(build, "lib", "liblockstep.so")
    n = 2000 + a.calls * a.rounds  # nccl_call_overhead's warm-up batch is 2,000 calls
    print("| op | stacks | instructions per call | of which the fixture's NCCL | added by the recorder |")
    print("|---|---|---|---|---|")
    details = []
    with tempfile.TemporaryDirectory(prefix="call_instructions.") as tmp:
        exe = build_bench(root, build, tmp)
        for op in a.ops.split(","):
            for stacks in [""] + [s for s in a.stacks.split(",") if s]:
                c = run_one(exe, build, lib, op, stacks, a.calls, a.rounds, tmp)
                names = set(ENTRY[op]) | {"p" + e for e in ENTRY[op]}
                fixture = sum(v for (fn, obj), v in c.items() if obj.startswith("libnccl.so") and fn in names)
                hooks = sum(v for (fn, obj), v in c.items() if obj == "liblockstep.so" and fn in names)
                total = hooks if stacks else fixture
                added = f"+{(total - fixture) / n:,.0f}" if stacks else ""
                print(f"| {op} | {stacks or 'no recorder'} | {total / n:,.0f} | {fixture / n:,.0f} | {added} |")
                if stacks and a.detail:
                    # the issuing thread's: not the writer's or watchdog's, not the start
                    top = sorted(((v, fn) for (fn, obj), v in c.items() if obj == "liblockstep.so"
                                  and v <= hooks and not OTHER.search(fn)), reverse=True)[:a.detail]
                    details.append((op, stacks, [(v / n, fn) for v, fn in top]))
        if a.ns:
            configs = [(op, st) for op in a.ops.split(",")
                       for st in [""] + [x for x in a.stacks.split(",") if x]]
            ns = {c: [] for c in configs}
            for _ in range(a.ns):
                for c in configs:
                    ns[c].append(time_ns(exe, build, lib, c[0], c[1], tmp))
                    shutil.rmtree(os.path.join(tmp, "traces"), ignore_errors=True)
            print(f"\n| op | stacks | ns per call, median of {a.ns} processes | added | each process |")
            print("|---|---|---|---|---|")
            for op, st in configs:
                med = sorted(ns[(op, st)])[len(ns[(op, st)]) // 2]
                base = sorted(ns[(op, "")])[len(ns[(op, "")]) // 2]
                added = f"+{med - base:,.0f}" if st else ""
                each = ", ".join(f"{v:,.0f}" for v in ns[(op, st)])
                print(f"| {op} | {st or 'no recorder'} | {med:,.0f} | {added} | {each} |")
    for op, stacks, top in details:
        print(f"\n{op}, stacks {stacks}: liblockstep functions, inclusive instructions per call")
        for v, fn in top:
            print(f"  {v:10,.0f}  {fn[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
