"""End to end: a Python program calls NCCL (CPU fixture) with the GIL released, under
LD_PRELOAD=liblockstep.so; the trace's frames table must name the Python functions and lines
that issued each op, on the main thread and on a threading.Thread.

Usage: e2e_nccl_frames.py <liblockstep.so> <fixture lib dir> <dir of lockstep_nccl_ext*.so>
"""
import glob
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import unittest


def mark_line(name):
    tag = "# MARK:" + name
    with open(__file__, encoding="utf-8") as src:
        for number, text in enumerate(src, 1):
            if text.rstrip().endswith(tag):
                return number
    raise AssertionError("no %s in %s" % (tag, __file__))


# --- the traced program (child process) ---------------------------------------------------

def issue_all_reduce(ext):
    return ext.all_reduce()  # MARK:main_issue


class Trainer:
    def step(self, ext):
        return issue_all_reduce(ext)  # MARK:step


def issue_from_thread(ext, out):
    out.append(ext.all_reduce())  # MARK:thread_issue


def child():
    import lockstep_nccl_ext as ext
    rcs = [Trainer().step(ext)]
    t = threading.Thread(target=issue_from_thread, args=(ext, rcs), name="worker")
    t.start()
    t.join(timeout=20)
    rcs.append(ext.destroy())
    if rcs != [0, 0, 0]:
        sys.exit("NCCL calls returned %r, expected [0, 0, 0]" % rcs)


# --- the test (parent process) ---------------------------------------------------------------

class E2ENcclPythonFrames(unittest.TestCase):
    LIB = FIXTURE = EXT_DIR = None

    def test_trace_frames_name_the_python_function_and_line_of_each_op(self):
        with tempfile.TemporaryDirectory() as trace_dir:
            env = dict(os.environ, LD_PRELOAD=self.LIB, LOCKSTEP_DIR=trace_dir,
                       LD_LIBRARY_PATH=self.FIXTURE, PYTHONPATH=self.EXT_DIR,
                       LOCKSTEP_STACKS="python")
            proc = subprocess.run([sys.executable, __file__, "--child"], env=env,
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 0, "child failed:\n" + proc.stdout + proc.stderr)
            files = glob.glob(os.path.join(trace_dir, "*.sqlite"))
            self.assertEqual(len(files), 1, "trace files: %r" % files)
            db = sqlite3.connect(files[0])
            rows = db.execute(
                "SELECT o.call_index, o.thread_name, f.function, f.file, f.line FROM ops o "
                "JOIN frames f ON f.stack_id = o.stack_id WHERE o.op = 'all_reduce' "
                "AND f.kind = 'python' ORDER BY o.call_index, f.depth").fetchall()
            mode = db.execute("SELECT value FROM meta WHERE key='stack_mode'").fetchone()
            guard = db.execute("SELECT value FROM meta WHERE key='python_guard'").fetchone()
            native = db.execute(
                "SELECT o.call_index, count(*), group_concat(f.module, '|') FROM ops o "
                "JOIN frames f ON f.stack_id = o.stack_id WHERE o.op = 'all_reduce' "
                "AND f.kind = 'native' GROUP BY o.call_index").fetchall()
        by_op = {}
        for call, thread, function, file, line in rows:
            by_op.setdefault(call, []).append((function, os.path.basename(file), line))
        self.assertEqual(mode, ("python",))
        self.assertIsNotNone(guard, "no python_guard meta")
        if sys.version_info < (3, 12):
            self.assertTrue(guard[0].startswith("exact guard: no code watchers"), guard)
        else:
            self.assertTrue(guard[0].startswith(("code watcher", "exact guard")), guard)
        self.assertEqual(len(by_op), 2, "python frames per all_reduce op: %r" % by_op)
        first, second = [by_op[k] for k in sorted(by_op)]
        me = os.path.basename(__file__)
        self.assertEqual(first[:3], [("issue_all_reduce", me, mark_line("main_issue")),
                                     ("Trainer.step", me, mark_line("step")),
                                     ("child", me, first[2][2])], first)
        self.assertEqual(first[-1][0], "<module>")
        self.assertEqual(second[0], ("issue_from_thread", me, mark_line("thread_issue")), second)
        self.assertTrue(any(f == "Thread.run" for f, _, _ in second), second)
        # Under Python frames only the innermost native frames are kept (stack_capture.h:
        # kNativeFramesUnderPython), the extension that called NCCL among them.
        self.assertEqual(len(native), 2, native)
        for call, count, modules in native:
            self.assertTrue(1 <= count <= 12, (call, count, modules))
            self.assertIn("lockstep_nccl_ext", modules, (call, modules))


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        E2ENcclPythonFrames.LIB, E2ENcclPythonFrames.FIXTURE, E2ENcclPythonFrames.EXT_DIR = \
            sys.argv[1:4]
        unittest.main(argv=sys.argv[:1])
