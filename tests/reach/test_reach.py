"""How NCCL is reached (docs/recorder.md, "How NCCL is reached"): programs that get NCCL's entry
points through dlsym on a handle of libnccl (ctypes as vLLM's/SGLang's pynccl, dlopen RTLD_LOCAL
or RTLD_DEEPBIND) are recorded like linked calls, with their Python frames.

Environment: LOCKSTEP_LIB (liblockstep.so), LOCKSTEP_FIXTURE (fixture lib dir), LOCKSTEP_CLI
(lockstep), DLOPEN_NCCL (tests/reach/dlopen_nccl).
"""
import glob
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from ranks import wait_all  # noqa: E402  (tests/harness: shared by tests/plugin and tests/reach)

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "pynccl_ctypes.py")
LIB = os.environ.get("LOCKSTEP_LIB", "")
FIXTURE = os.environ.get("LOCKSTEP_FIXTURE", "")
CLI = os.environ.get("LOCKSTEP_CLI", "")
DLOPEN = os.environ.get("DLOPEN_NCCL", "")
DRIVER_GRAPH = os.environ.get("DRIVER_GRAPH", "")
TIMEOUT = 120


def mark_line(name):
    tag = "# MARK:" + name
    with open(PROGRAM, encoding="utf-8") as src:
        for number, text in enumerate(src, 1):
            if text.rstrip().endswith(tag):
                return number
    raise AssertionError("no %s in %s" % (tag, PROGRAM))


def traced_env(trace_dir, **extra):
    env = dict(os.environ, LD_PRELOAD=LIB, LOCKSTEP_DIR=trace_dir, LD_LIBRARY_PATH=FIXTURE,
               LOCKSTEP_STACKS="python", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def run_ranks(trace_dir, nranks, *args, **extra_env):
    id_file = os.path.join(os.path.dirname(trace_dir), "nccl-id")
    procs = []
    for rank in range(nranks):
        env = traced_env(trace_dir, RANK=str(rank), **extra_env)
        cmd = [sys.executable, PROGRAM, "--nccl", os.path.join(FIXTURE, "libnccl.so.2"),
               "--rank", str(rank), "--nranks", str(nranks), "--id-file", id_file,
               "--host-buffers"] + list(args)
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = wait_all(procs, TIMEOUT)
    return outs


def traces(trace_dir):
    files = sorted(glob.glob(os.path.join(trace_dir, "*.sqlite")))
    by_rank = {}
    for f in files:
        db = sqlite3.connect(f)
        meta = dict(db.execute("SELECT key, value FROM meta"))
        by_rank[int(meta["global_rank"])] = (db, meta)
    return by_rank


class CtypesPynccl(unittest.TestCase):
    def test_two_ranks_recorded_completely_with_python_frames(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir = os.path.join(tmp, "trace")
            outs = run_ranks(trace_dir, 2, "--steps", "10")
            for rc, out in outs:
                self.assertEqual(rc, 0, out)
            by_rank = traces(trace_dir)
            self.assertEqual(sorted(by_rank), [0, 1])
            me = os.path.basename(PROGRAM)
            for rank, (db, meta) in by_rank.items():
                self.assertIn("dlsym", meta.get("nccl_reached", "").split(","), meta)
                self.assertEqual(os.path.realpath(meta["nccl_libraries"]),
                                 os.path.realpath(os.path.join(FIXTURE, "libnccl.so.2")))
                ops = db.execute(
                    "SELECT o.seq, o.op, o.count, o.state, c.call_index IS NOT NULL FROM ops o "
                    "LEFT JOIN completions c ON c.call_index = o.call_index "
                    "ORDER BY o.seq").fetchall()
                self.assertEqual(ops, [(s, "all_reduce", 64, "enqueued", 1) for s in range(1, 11)],
                                 "rank %d" % rank)
                comms = db.execute("SELECT nranks, rank FROM comms").fetchall()
                self.assertEqual(comms, [(2, rank)])
                frames = db.execute(
                    "SELECT o.seq, f.function, f.file, f.line FROM ops o JOIN frames f "
                    "ON f.stack_id = o.stack_id WHERE f.kind = 'python' ORDER BY o.seq, f.depth"
                ).fetchall()
                per_op = {}
                for seq, fn, file, line in frames:
                    per_op.setdefault(seq, []).append((fn, os.path.basename(file), line))
                self.assertEqual(sorted(per_op), list(range(1, 11)))
                for seq, stack in per_op.items():
                    self.assertEqual(stack[:2], [
                        ("PyNcclCommunicator.all_reduce", me, mark_line("nccl_call")),
                        ("run_step", me, mark_line("issue"))], "seq %d" % seq)
            doctor = subprocess.run([CLI, "doctor", trace_dir], capture_output=True, text=True,
                                    timeout=TIMEOUT)
            self.assertEqual(doctor.returncode, 0, doctor.stderr)
            lib = os.path.join(FIXTURE, "libnccl.so.2")
            # The two ranks' reports are the same: one report for both (--per-file: each).
            self.assertEqual(doctor.stdout.count("reached through: a library loaded RTLD_LOCAL "
                                                 "(found by scanning); dlsym on a libnccl handle"),
                             1, doctor.stdout)
            self.assertIn("(this report for 2 files: ranks 0-1, on 1 host)", doctor.stdout)
            self.assertEqual(doctor.stdout.count("libnccl used: " + lib), 1, doctor.stdout)
            self.assertIn("recorded: 10 op rows", doctor.stdout)
            per_file = subprocess.run([CLI, "doctor", "--per-file", trace_dir], capture_output=True,
                                      text=True, timeout=TIMEOUT)
            self.assertEqual(per_file.returncode, 0, per_file.stderr)
            self.assertEqual(per_file.stdout.count("reached through: a library loaded RTLD_LOCAL "
                                                   "(found by scanning); dlsym on a libnccl handle"),
                             2, per_file.stdout)
            self.assertEqual(per_file.stdout.count("libnccl used: " + lib), 2, per_file.stdout)

    def test_doctor_on_a_directory_without_traces_says_so(self):
        with tempfile.TemporaryDirectory() as tmp:
            doctor = subprocess.run([CLI, "doctor", tmp], capture_output=True, text=True,
                                    timeout=TIMEOUT)
            self.assertEqual(doctor.returncode, 2)
            self.assertIn("no trace file", doctor.stdout)

    def test_rank_dependent_divergence_is_diagnosed_with_the_python_frame(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir = os.path.join(tmp, "trace")
            # The mismatched op fails (instead of hanging) and later ops time out: the ranks end.
            run_ranks(trace_dir, 2, "--steps", "4", "--diverge-at", "2",
                      LOCKSTEP_FIXTURE_MISMATCH="error", LOCKSTEP_FIXTURE_HANG_TIMEOUT_S="3")
            proc = subprocess.run([CLI, "analyze", "--json", trace_dir], capture_output=True,
                                  text=True, timeout=TIMEOUT)
            self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
            report = json.loads(proc.stdout)
            div = report["divergences"][0]
            self.assertEqual((div["kind"], div["seq"]), ("count", 3), div)
            sides = {s["rank"]: s for s in div["sides"]}
            self.assertEqual((sides[0]["count"], sides[1]["count"]), (64, 65))
            for side in sides.values():
                py = [(f["function"], os.path.basename(f["file"]), f["line"])
                      for f in side["stack"] if f["kind"] == "python"]
                self.assertEqual(py[0], ("PyNcclCommunicator.all_reduce",
                                         os.path.basename(PROGRAM), mark_line("nccl_call")))
            text = subprocess.run([CLI, "analyze", trace_dir], capture_output=True, text=True,
                                  timeout=TIMEOUT).stdout
            self.assertIn("pynccl_ctypes.py:%d" % mark_line("nccl_call"), text)

    def test_dlsym_of_other_names_starts_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir = os.path.join(tmp, "trace")
            code = ("import ctypes; libc = ctypes.CDLL(None); libc.puts(b'hello'); "
                    "n = ctypes.CDLL('libnccl.so.2'); n.ncclGetVersion")
            proc = subprocess.run([sys.executable, "-c", code], env=traced_env(trace_dir),
                                  capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual((proc.returncode, proc.stdout), (0, "hello\n"), proc.stderr)
            self.assertFalse(os.path.exists(trace_dir), "no NCCL call: no trace")


class DlopenModes(unittest.TestCase):
    def check_mode(self, mode):
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir = os.path.join(tmp, "trace")
            env = traced_env(trace_dir, LOCKSTEP_STACKS="native")
            proc = subprocess.run([DLOPEN, mode, os.path.join(FIXTURE, "libnccl.so.2")], env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            by_rank = traces(trace_dir)
            self.assertEqual(len(by_rank), 1)
            db, meta = list(by_rank.values())[0]
            self.assertIn("dlsym", meta.get("nccl_reached", "").split(","), meta)
            ops = db.execute(
                "SELECT o.seq, o.op, o.count, c.call_index IS NOT NULL FROM ops o "
                "LEFT JOIN completions c ON c.call_index = o.call_index ORDER BY o.seq").fetchall()
            # ncclBcast calls ncclBroadcast inside NCCL: still one op.
            self.assertEqual(ops, [(1, "all_reduce", 16, 1), (2, "all_reduce", 16, 1),
                                   (3, "all_reduce", 16, 1), (4, "broadcast", 8, 1)])
            comms = db.execute("SELECT nranks, rank, end_kind FROM comms").fetchall()
            self.assertEqual(comms, [(1, 0, "destroy")])

    def test_rtld_local(self):
        self.check_mode("local")

    def test_rtld_deepbind(self):
        self.check_mode("deepbind")

    def test_rtld_global(self):
        self.check_mode("global")


class DriverApiGraphs(unittest.TestCase):
    """A graph with a captured ncclAllReduce, replayed N times through the driver API: N
    graph_launches rows and N graph_launched ops with seq 2..N+1 (seq 1 is an eager op)."""
    N = 5

    def check_mode(self, mode):
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir = os.path.join(tmp, "trace")
            env = traced_env(trace_dir, LOCKSTEP_STACKS="none")
            proc = subprocess.run([DRIVER_GRAPH, mode, str(self.N)], env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            (db, meta), = traces(trace_dir).values()
            launches = db.execute("SELECT count(*) FROM graph_launches").fetchone()[0]
            self.assertEqual(launches, self.N, mode)
            ops = db.execute(
                "SELECT o.seq, o.state, c.call_index IS NOT NULL FROM ops o LEFT JOIN completions c "
                "ON c.call_index = o.call_index WHERE o.seq IS NOT NULL ORDER BY o.seq").fetchall()
            self.assertEqual(ops, [(1, "enqueued", 1)] +
                             [(s, "graph_launched", 1) for s in range(2, self.N + 2)], mode)
            captured = db.execute("SELECT count(*) FROM ops WHERE state = 'captured'").fetchone()
            self.assertEqual(captured, (1,))

    def test_linked_driver_functions(self):
        self.check_mode("direct")

    def test_functions_from_cuGetProcAddress_found_with_dlsym(self):
        self.check_mode("getproc")

    def test_captured_on_one_stream_launched_from_another_thread(self):
        self.check_mode("thread")

    def test_instantiate_with_params(self):
        self.check_mode("params")

    def test_exec_updated_to_a_graph_with_nccl(self):
        self.check_mode("update")


if __name__ == "__main__":
    for name in ("LIB", "FIXTURE", "CLI", "DLOPEN"):
        if not globals()[name]:
            sys.exit("test_reach.py: set the environment (see the docstring)")
    unittest.main()
