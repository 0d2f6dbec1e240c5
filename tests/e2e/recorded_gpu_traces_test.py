"""The analyzer, the CI gate, the model checker and replay on traces recorded on 2 H200s.

Usage: recorded_gpu_traces_test.py LOCKSTEP_EXE DATA_DIR   (LD_LIBRARY_PATH: the CPU fixture)
The broken run must be diagnosed as the seed's bug: at seq 65 of the one process group, rank 0
in reduce_scatter from FSDP's post_backward and rank 1 in all_to_all from the Ulysses
(dist.nn.functional) backward. The fixed run must pass `check`. Replay on the CPU NCCL fixture
must hang for the broken schedule and complete for the fixed one.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

LOCKSTEP, DATA = sys.argv[1], sys.argv[2]
BROKEN = os.path.join(DATA, "h200x2-fsdp-ulysses-broken")
FIXED = os.path.join(DATA, "h200x2-fsdp-ulysses-fixed")
failures = []


def expect(cond, what, got=""):
    print(("ok    " if cond else "FAIL  ") + what + ("" if cond else f"\n      got: {got}"))
    if not cond:
        failures.append(what)


def run(*args, timeout=120):
    p = subprocess.run([LOCKSTEP, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


copies = []  # removed at the end


def copy(src):
    # analyze never writes, but replay writes its trace next to a copy, not into tests/data
    d = tempfile.mkdtemp(prefix="lockstep-gpu-trace-")
    copies.append(d)
    dst = os.path.join(d, os.path.basename(src))
    shutil.copytree(src, dst)
    return dst


def analyze_names_fsdp_reduce_scatter_vs_ulysses_all_to_all_at_seq_65():
    rc, out, err = run("analyze", "--json", BROKEN)
    expect(rc == 1, "analyze exits 1 on the broken trace", rc)
    r = json.loads(out)
    fd = r["first_divergence"]
    expect(fd["kind"] == "op_type" and fd["seq"] == 65, "first divergence: op type at seq 65",
           (fd["kind"], fd["seq"]))
    sides = {s["rank"]: s for s in fd["sides"]}
    expect(sides[0]["op"] == "reduce_scatter" and sides[1]["op"] == "all_to_all",
           "rank 0 reduce_scatter, rank 1 all_to_all", (sides[0]["op"], sides[1]["op"]))
    f0 = [f["function"] for f in sides[0]["stack"]]
    f1 = [f["function"] for f in sides[1]["stack"]]
    expect("FSDPParamGroup.post_backward" in f0, "rank 0's stack has FSDP post_backward", f0)
    expect("_AlltoAllSingle.backward" in f1, "rank 1's stack has the all-to-all's backward", f1)
    expect(all(s["state"] == "in flight" for s in fd["sides"]), "both sides in flight",
           [s["state"] for s in fd["sides"]])
    expect(r["hang"] is not None and r["clean"] is False, "a hang is reported", r["hang"])


def check_passes_on_fixed_and_fails_on_broken():
    rc, out, _ = run("check", FIXED)
    expect(rc == 0, "check passes on the fixed run", out)
    rc, out, _ = run("check", BROKEN)
    expect(rc == 1, "check fails on the broken run", rc)


def model_checker_rejects_broken_accepts_fixed():
    rc, out, _ = run("replay", "--model", BROKEN)
    expect(rc == 1 and "seq 65" in out and "reduce_scatter" in out and "all_to_all" in out,
           "model checker: deadlock witness at seq 65", out)
    rc, out, _ = run("replay", "--model", FIXED)
    expect(rc == 0, "model checker: the fixed schedule can complete", out)


def replay_on_cpu_fixture_hangs_broken_completes_fixed():
    rc, out, err = run("replay", copy(BROKEN), "--timeout", "5", timeout=180)
    expect(rc == 1 and "HANG" in out, "replay of the broken schedule hangs", out + err)
    rc, out, err = run("replay", copy(FIXED), "--timeout", "30", timeout=180)
    expect(rc == 0 and "completed" in out, "replay of the fixed schedule completes", out + err)


for t in (analyze_names_fsdp_reduce_scatter_vs_ulysses_all_to_all_at_seq_65,
          check_passes_on_fixed_and_fails_on_broken,
          model_checker_rejects_broken_accepts_fixed,
          replay_on_cpu_fixture_hangs_broken_completes_fixed):
    print(f"== {t.__name__}")
    t()
for d in copies:
    shutil.rmtree(d, ignore_errors=True)
print(f"{len(failures)} failed checks" if failures else "all checks passed")
sys.exit(1 if failures else 0)
