"""liblockstep as NCCL's profiler plugin (docs/recorder.md, "NCCL's profiler plugin"), on the CPU
fixture NCCL, which loads NCCL_PROFILER_PLUGIN and drives ncclProfiler_v5 as NCCL 2.28.9 does:
  - the plugin alone (no LD_PRELOAD) records a 2-rank program the analyzer can use;
  - with both paths, every call is seen by both and coverage reports zero missed;
  - a program with a private (static) NCCL: the interposer misses every call, coverage names them.

Environment: LOCKSTEP_LIB (liblockstep.so), LOCKSTEP_FIXTURE (fixture lib dir), LOCKSTEP_CLI
(lockstep), PLUGIN_RANKS / PLUGIN_RANKS_STATIC (tests/plugin/plugin_ranks.cpp, two builds).
"""
import glob
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from ranks import wait_all  # noqa: E402  (tests/harness: shared by tests/plugin and tests/reach)

LIB = os.environ.get("LOCKSTEP_LIB", "")
FIXTURE = os.environ.get("LOCKSTEP_FIXTURE", "")
CLI = os.environ.get("LOCKSTEP_CLI", "")
RANKS = os.environ.get("PLUGIN_RANKS", "")
RANKS_STATIC = os.environ.get("PLUGIN_RANKS_STATIC", "")
TIMEOUT = 120

# What plugin_ranks issues, as the ops table must show it (op, dtype, count, root).
EXPECTED_OPS = [
    ("all_reduce", "float32", 1024, None),
    ("all_reduce", "float32", 1024, None),
    ("all_reduce", "float32", 1024, None),
    ("all_gather", "float32", 256, None),
    ("broadcast", "int32", 64, 0),
    ("reduce_scatter", "float32", 128, None),
    ("all_to_all", "float32", 64, None),   # grouped send + recv with the only peer
    ("coalesced", "float32", 192, None),   # two all_reduces in one group
]
NCCL_CALLS = 10  # 6 single calls, send + recv, 2 all_reduces


def run_ranks(tmp, name, program, plugin=True, preload=False, args=(), extra=None):
    trace_dir = os.path.join(tmp, name)
    rendezvous = os.path.join(tmp, name + "-rv")
    os.makedirs(rendezvous)
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCKSTEP_RENDEZVOUS_DIR=rendezvous,
                   LD_LIBRARY_PATH=FIXTURE, LOCKSTEP_DIR=trace_dir)
        env.pop("LD_PRELOAD", None)
        env.pop("NCCL_PROFILER_PLUGIN", None)
        if plugin:
            env["NCCL_PROFILER_PLUGIN"] = LIB
        if preload:
            env["LD_PRELOAD"] = LIB
        env.update(extra or {})
        procs.append(subprocess.Popen([program] + list(args), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = wait_all(procs, TIMEOUT)
    return trace_dir, outs


def by_rank(trace_dir):
    out = {}
    for f in sorted(glob.glob(os.path.join(trace_dir, "*.lockstep.sqlite"))):
        db = sqlite3.connect(f)
        meta = dict(db.execute("SELECT key, value FROM meta"))
        out[int(meta["global_rank"])] = (db, meta)
    return out


def analyze(trace_dir, *args):
    return subprocess.run([CLI, "analyze", trace_dir] + list(args), capture_output=True, text=True,
                          timeout=TIMEOUT)


class ProfilerPlugin(unittest.TestCase):
    def assert_ran(self, outs):
        for rc, out in outs:
            self.assertEqual(rc, 0, out)

    def test_plugin_alone_records_what_the_analyzer_needs(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir, outs = run_ranks(tmp, "trace", RANKS, plugin=True, preload=False)
            self.assert_ran(outs)
            traces = by_rank(trace_dir)
            self.assertEqual(sorted(traces), [0, 1])
            hashes = set()
            for rank, (db, meta) in traces.items():
                self.assertEqual(meta.get("profiler_plugin"), "ncclProfiler_v5")
                self.assertEqual(meta.get("interposer_preloaded"), "0")
                self.assertEqual(meta.get("finished"), "1")  # NCCL's dlclose did not unload it
                self.assertIn("profiler_plugin", meta.get("nccl_reached", "").split(","))
                ops = db.execute("SELECT op, dtype, count, root, seq, redop FROM ops "
                                 "ORDER BY call_index").fetchall()
                self.assertEqual([o[:4] for o in ops], EXPECTED_OPS, rank)
                self.assertEqual([o[4] for o in ops], list(range(1, len(EXPECTED_OPS) + 1)))
                # The plugin is never told the reduction op: unknown, not invented.
                self.assertEqual({o[5] for o in ops}, {None})
                parts = db.execute("SELECT p.op, p.peer FROM op_parts p JOIN ops o USING(call_index) "
                                   "WHERE o.op = 'all_to_all' ORDER BY part").fetchall()
                self.assertEqual(parts, [("send", 1 - rank), ("recv", 1 - rank)])
                done = db.execute("SELECT count(*) FROM completions").fetchone()[0]
                self.assertEqual(done, len(EXPECTED_OPS))
                comms = db.execute("SELECT c.comm_hash, p.nccl_comm_hash, p.nranks, p.rank, "
                                   "p.finalize_mono_ns IS NOT NULL FROM comms c JOIN profiler_comms p "
                                   "ON p.comm_id = c.id").fetchall()
                self.assertEqual(len(comms), 1)
                self.assertEqual(comms[0][0], comms[0][1])
                self.assertEqual(comms[0][2:], (2, rank, 1))
                hashes.add(comms[0][0])
                seen = db.execute("SELECT seen_by, count(*), count(call_index) FROM profiler_ops "
                                  "GROUP BY 1").fetchall()
                self.assertEqual(seen, [("plugin", NCCL_CALLS, NCCL_CALLS)])
                # NCCL numbers collectives per type: the third all_reduce is #2, all_gather #0.
                seqs = db.execute("SELECT nccl_func, nccl_seq FROM profiler_ops ORDER BY id").fetchall()
                self.assertEqual(seqs[:4], [("AllReduce", 0), ("AllReduce", 1), ("AllReduce", 2),
                                            ("AllGather", 0)])
            self.assertEqual(len(hashes), 1, "members must share the communicator's identity")
            res = analyze(trace_dir)
            self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
            self.assertIn("clean", res.stdout)
            self.assertIn("no interposer (liblockstep only as NCCL's plugin)", res.stdout)
            res = analyze(trace_dir, "--json")
            cov = json.loads(res.stdout)["coverage"]
            self.assertEqual(cov["plugin_processes"], 2)
            self.assertEqual(cov["missed_by_interposer"], 2 * NCCL_CALLS)
            self.assertEqual(cov["missed_by_loaded_interposer"], 0)

    def test_plugin_alone_divergence_is_found(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir, outs = run_ranks(tmp, "trace", RANKS, args=["--diverge"],
                                        extra={"LOCKSTEP_FIXTURE_MISMATCH": "error"})
            self.assert_ran(outs)
            res = analyze(trace_dir)
            self.assertEqual(res.returncode, 1, res.stdout + res.stderr)
            self.assertIn("seq 3: dtype differs: float32 vs int32", res.stdout)

    def test_both_paths_see_every_call_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace_dir, outs = run_ranks(tmp, "trace", RANKS, plugin=True, preload=True)
            self.assert_ran(outs)
            traces = by_rank(trace_dir)
            self.assertEqual(sorted(traces), [0, 1])
            for rank, (db, meta) in traces.items():
                self.assertEqual(meta.get("interposer_preloaded"), "1")
                ops = db.execute("SELECT op, dtype, count, root FROM ops ORDER BY call_index").fetchall()
                self.assertEqual(ops, EXPECTED_OPS)  # no op twice
                redops = db.execute("SELECT redop FROM ops WHERE op = 'all_reduce'").fetchall()
                self.assertEqual(redops, [("sum",)] * 3)  # the interposer's rows
                seen = db.execute("SELECT seen_by, count(*), count(call_index) FROM profiler_ops "
                                  "GROUP BY 1").fetchall()
                self.assertEqual(seen, [("both", NCCL_CALLS, 0)])
                linked = db.execute("SELECT count(comm_id) FROM profiler_comms").fetchone()[0]
                self.assertEqual(linked, 0)  # the plugin wrote no comms row of its own
            junit = os.path.join(tmp, "junit.xml")
            res = analyze(trace_dir, "--junit", junit)
            self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
            self.assertIn("COVERAGE (NCCL's profiler plugin): 0 NCCL calls not seen by the interposer",
                          res.stdout)
            case = [c for c in ET.parse(junit).getroot().iter("testcase")
                    if c.get("name") == "interposer_coverage"]
            self.assertEqual(len(case), 1)
            self.assertIsNone(case[0].find("failure"))
            cov = json.loads(analyze(trace_dir, "--json").stdout)["coverage"]
            self.assertEqual((cov["plugin_processes"], cov["missed_by_interposer"]), (2, 0))

    def test_private_nccl_missed_by_the_interposer_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            # The interposer alone sees nothing of a static NCCL: no trace at all.
            alone, outs = run_ranks(tmp, "alone", RANKS_STATIC, plugin=False, preload=True)
            self.assert_ran(outs)
            self.assertEqual(glob.glob(os.path.join(alone, "*.sqlite")), [])
            trace_dir, outs = run_ranks(tmp, "trace", RANKS_STATIC, plugin=True, preload=True)
            self.assert_ran(outs)
            traces = by_rank(trace_dir)
            for rank, (db, meta) in traces.items():
                self.assertEqual(meta.get("interposer_preloaded"), "1")
                ops = db.execute("SELECT op, dtype, count, root FROM ops ORDER BY call_index").fetchall()
                self.assertEqual(ops, EXPECTED_OPS)
            junit = os.path.join(tmp, "junit.xml")
            res = analyze(trace_dir, "--junit", junit)
            self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
            self.assertIn("10 not seen by the interposer (a static or private NCCL)", res.stdout)
            self.assertIn("missed: all_reduce float32 count=1024 on NCCL comm", res.stdout)
            self.assertIn("missed: broadcast int32 count=64", res.stdout)
            case = [c for c in ET.parse(junit).getroot().iter("testcase")
                    if c.get("name") == "interposer_coverage"]
            self.assertEqual(len(case), 1)
            # Coverage does not change the verdict (exit 0): named in the case's output, never a
            # failure the exit code does not have (a CI system may read only the XML).
            self.assertIsNone(case[0].find("failure"))
            out = case[0].find("system-out")
            self.assertIsNotNone(out)
            self.assertIn("10 NCCL calls not seen by the interposer", out.text or "")
            cov = json.loads(analyze(trace_dir, "--json").stdout)["coverage"]
            self.assertEqual(cov["missed_by_loaded_interposer"], 2 * NCCL_CALLS)
            first = cov["processes"][0]["missed_examples"][0]
            self.assertEqual((first["op"], first["dtype"], first["count"], first["nccl_seq"]),
                             ("all_reduce", "float32", 1024, 0))
            # One analysis for every command (analyzer/analysis.h): check's JUnit and the report
            # name the coverage too (before: only analyze read it).
            check_junit = os.path.join(tmp, "check.xml")
            subprocess.run([CLI, "check", trace_dir, "--junit", check_junit], capture_output=True,
                           text=True, timeout=TIMEOUT)
            case = [c for c in ET.parse(check_junit).getroot().iter("testcase")
                    if c.get("name") == "interposer_coverage"]
            self.assertEqual(len(case), 1)
            self.assertIsNone(case[0].find("failure"))
            self.assertIn("not seen by the interposer", case[0].find("system-out").text or "")
            page = subprocess.run([CLI, "report", trace_dir, "-o", "-"], capture_output=True,
                                  text=True, timeout=TIMEOUT).stdout
            self.assertIn('"missed_by_loaded_interposer":20', page.replace(" ", ""))
            doctor = subprocess.run([CLI, "doctor", trace_dir], capture_output=True, text=True,
                                    timeout=TIMEOUT)
            self.assertIn("the plugin saw 10 NCCL calls, 10 of them not seen by the interposer",
                          doctor.stdout)

    def test_plugin_none_or_without_the_symbol_is_not_loaded(self):
        # "none", and a library without ncclProfiler_v5 (NCCL then runs without a plugin).
        for value in ("none", os.path.join(FIXTURE, "libcuda.so.1")):
            with tempfile.TemporaryDirectory() as tmp:
                trace_dir, outs = run_ranks(tmp, "trace", RANKS, plugin=False, preload=True,
                                            extra={"NCCL_PROFILER_PLUGIN": value})
                self.assert_ran(outs)
                traces = by_rank(trace_dir)
                self.assertEqual(sorted(traces), [0, 1])
                for rank, (db, meta) in traces.items():
                    self.assertNotIn("profiler_plugin", meta)
                    # Schema 3: the plugin's tables exist only where NCCL loaded the plugin.
                    self.assertEqual(db.execute("SELECT count(*) FROM sqlite_master "
                                                "WHERE name = 'profiler_ops'").fetchone()[0], 0)
                res = analyze(trace_dir)
                self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
                self.assertNotIn("COVERAGE", res.stdout)
                cov = json.loads(analyze(trace_dir, "--json").stdout)["coverage"]
                self.assertEqual(cov["plugin_processes"], 0)


if __name__ == "__main__":
    unittest.main()
