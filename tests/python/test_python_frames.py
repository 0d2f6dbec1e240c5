"""Python frames captured by lockstep without the GIL, checked against CPython's own view.

Each test captures through the extension (GIL released, as in an NCCL hook) and, in the same
statement, walks sys._getframe(): both must agree on every frame's (file, qualname, line).
Some tests also check literal qualnames and lines found from '# MARK:' comments in this file,
so a wrong line decoder cannot hide behind the reference.
Run: PYTHONPATH=<dir of lockstep_pyframes_test*.so> python -m unittest test_python_frames
"""
import asyncio
import os
import subprocess
import sys
import threading
import unittest

import lockstep_pyframes_test as m

THIS_FILE = __file__
HAS_QUALNAME = sys.version_info >= (3, 11)


def QN(qualname):
    """The name lockstep reports for a function of this qualname: 3.10's code objects carry only
    co_name (the last component), 3.11+ the qualname."""
    return qualname if HAS_QUALNAME else qualname.rsplit(".", 1)[-1]


def code_name(code):
    return code.co_qualname if HAS_QUALNAME else code.co_name


def reference(skip=1):
    """CPython's view of the caller's stack, innermost first, in capture()'s format."""
    f = sys._getframe(skip)
    out = []
    while f is not None:
        out.append((f.f_code.co_filename, code_name(f.f_code), f.f_lineno or 0))
        f = f.f_back
    return out


def mark_line(name):
    """Line number of the '# MARK:<name>' comment in this file."""
    tag = "# MARK:" + name
    with open(THIS_FILE, encoding="utf-8") as src:
        for number, text in enumerate(src, 1):
            if text.rstrip().endswith(tag):
                return number
    raise AssertionError("no %s in %s" % (tag, THIS_FILE))


def describe(frames):
    return "\n".join("  %s:%d %s" % (f, l, q) for f, q, l in frames)


class Outer:
    def method(self):
        return m.capture(), reference()  # MARK:method

    @staticmethod
    def static():
        return m.capture(), reference()


def gen():
    yield m.capture(), reference()  # MARK:gen


async def coro():
    await asyncio.sleep(0)
    return m.capture(), reference()  # MARK:coro


class PythonFramesTest(unittest.TestCase):
    def assertSameStack(self, got, ref):
        self.assertEqual(got, ref, "\ncaptured:\n%s\nCPython says:\n%s" %
                         (describe(got), describe(ref)))

    def test_available_reports_this_interpreter(self):
        self.assertTrue(m.available(), m.status())
        want = "CPython %d.%d.%d" % sys.version_info[:3]
        self.assertEqual(m.status(), want)

    def test_nested_functions_report_qualname_and_line_of_every_frame(self):
        def level1():
            def level2():
                return m.capture(), reference()  # MARK:nested
            return level2()
        got, ref = level1()
        self.assertSameStack(got, ref)
        self.assertEqual(got[0], (THIS_FILE, QN("PythonFramesTest.test_nested_functions_report_"
                                  "qualname_and_line_of_every_frame.<locals>.level1.<locals>."
                                  "level2"), mark_line("nested")))
        self.assertEqual(got[1][1], QN("PythonFramesTest.test_nested_functions_report_qualname_"
                         "and_line_of_every_frame.<locals>.level1"))

    def test_method_frame_is_named_class_dot_method(self):
        got, ref = Outer().method()
        self.assertSameStack(got, ref)
        self.assertEqual(got[0], (THIS_FILE, QN("Outer.method"), mark_line("method")))
        got, ref = Outer.static()
        self.assertSameStack(got, ref)
        self.assertEqual(got[0][1], QN("Outer.static"))

    def test_generator_frame_is_captured_with_its_consumer(self):
        got, ref = next(gen())
        self.assertSameStack(got, ref)
        self.assertEqual(got[0], (THIS_FILE, "gen", mark_line("gen")))
        self.assertEqual(got[1][1], QN("PythonFramesTest.test_generator_frame_is_captured_with_"
                         "its_consumer"))

    def test_coroutine_frame_is_captured_under_the_event_loop(self):
        got, ref = asyncio.run(coro())
        self.assertSameStack(got, ref)
        self.assertEqual(got[0], (THIS_FILE, "coro", mark_line("coro")))
        self.assertIn("run", [q.rsplit(".", 1)[-1] for _, q, _ in got],
                      "asyncio's frames are missing:\n" + describe(got))

    def test_lambda_frame_is_named_lambda(self):
        f = lambda: (m.capture(), reference())  # MARK:lambda
        got, ref = f()
        self.assertSameStack(got, ref)
        self.assertEqual(got[0][1], QN("PythonFramesTest.test_lambda_frame_is_named_lambda."
                         "<locals>.<lambda>"))
        self.assertEqual(got[0][2], mark_line("lambda"))

    def test_lines_are_right_after_an_exception_was_handled(self):
        try:
            raise ValueError("handled")
        except ValueError:
            got, ref = m.capture(), reference()  # MARK:in_except
            self.assertSameStack(got, ref)
            self.assertEqual(got[0][2], mark_line("in_except"))
        finally:
            pass
        got, ref = m.capture(), reference()  # MARK:after_except
        self.assertSameStack(got, ref)
        self.assertEqual(got[0][2], mark_line("after_except"))

    def test_non_main_thread_captures_its_own_stack(self):
        result = {}

        def worker():
            result["frames"] = (m.capture(), reference())  # MARK:thread

        t = threading.Thread(target=worker, name="capture-worker")
        t.start()
        t.join(timeout=20)
        self.assertFalse(t.is_alive(), "worker thread did not finish")
        got, ref = result["frames"]
        self.assertSameStack(got, ref)
        self.assertEqual(got[0][2], mark_line("thread"))
        self.assertTrue(got[-1][0].endswith("threading.py"),
                        "outermost frame should be threading's bootstrap:\n" + describe(got))

    def test_capture_with_gil_held_matches_capture_without(self):
        got, ref = m.capture(release_gil=False), reference()
        self.assertSameStack(got, ref)

    def test_pure_c_thread_captures_no_frames(self):
        self.assertEqual(m.capture_in_c_thread(), 0)

    def test_deep_stack_keeps_the_innermost_max_frames(self):
        def recurse(n, limit):
            if n == 0:
                return m.capture(max=limit), reference()
            return recurse(n - 1, limit)
        got, ref = recurse(30, 64)
        self.assertSameStack(got, ref)
        self.assertGreaterEqual(len(got), 31)
        got, ref = recurse(30, 5)
        self.assertEqual(len(got), 5)
        self.assertSameStack(got, ref[:5])
        self.assertEqual(m.capture(max=0), [])

    def test_non_ascii_names_and_files_are_returned_as_utf8(self):
        for filename, name in [("fichier_é.py", "café"),          # 1-byte kind, not ASCII
                               ("ファイル.py", "función_λ"),        # 2-byte kind
                               ("file_\U0001F600.py", "naïve")]:  # 4-byte kind
            ns = {}
            exec(compile("\ndef %s(m):\n    return m.capture(max=1)\n" % name, filename,
                         "exec"), ns)
            self.assertEqual(ns[name](m), [(filename, name, 3)])

    def test_reused_code_object_address_resolves_the_new_function(self):
        seen, reused = set(), 0
        for i in range(300):
            # Same name, file and first line each time; only the body (so the line) differs:
            # a stale intern entry would report the previous function's line.
            src = "def fn(m):\n" + "    x = 1\n" * (i % 7) + "    return m.capture(max=1)\n"
            ns = {}
            exec(compile(src, "<reuse>", "exec"), ns)
            code_id = id(ns["fn"].__code__)
            reused += code_id in seen
            seen.add(code_id)
            self.assertEqual(ns["fn"](m), [("<reuse>", "fn", 2 + i % 7)], "iteration %d" % i)
            ns.clear()  # fn <-> its globals is a cycle: break it so the code dies now
        self.assertGreater(reused, 0, "no code object address was reused: guard not exercised")

    def test_reused_code_object_address_with_another_name_resolves_the_new_name(self):
        for i in range(500):
            # Identical bodies: only the names differ, and their str objects are freed with
            # the code too, so their addresses can come back as well.
            ns = {}
            exec(compile("def f%d(m):\n    return m.capture(max=1)\n" % i, "<file%d>" % i,
                         "exec"), ns)
            self.assertEqual(ns["f%d" % i](m), [("<file%d>" % i, "f%d" % i, 2)], "iteration %d" % i)
            ns.clear()

    def test_concurrent_threads_intern_new_code_objects_consistently(self):
        errors = []

        def worker(k):
            for i in range(100):
                name = "w%d_%d" % (k, i)
                ns = {}
                exec(compile("\n" * (i % 5) + "def %s(m):\n    return m.capture(max=1)\n"
                             % name, "<thread%d>" % k, "exec"), ns)
                got = ns[name](m)
                want = [("<thread%d>" % k, name, 2 + i % 5)]
                if got != want:
                    errors.append((got, want))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        self.assertFalse(any(t.is_alive() for t in threads), "workers did not finish")
        self.assertEqual(errors, [])

    def test_hash_is_equal_for_the_same_site_and_differs_between_sites(self):
        def site():
            return m.capture_hash()
        # The hash keys on instruction offsets: the same call instruction, run twice.
        a, b = [site() for _ in range(2)]
        self.assertEqual(a, b)
        c = m.capture_hash()
        self.assertNotEqual(a, c)
        d = [m.capture_hash() for _ in range(2)]
        self.assertEqual(d[0], d[1])
        self.assertNotEqual(c, d[0], "two lines of one function must hash differently")


def all_code_objects(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_linetable"):
            yield from all_code_objects(const)


class LineTableTest(unittest.TestCase):
    def test_decoder_agrees_with_co_lines_on_stdlib_code(self):
        import asyncio.base_events
        import json.decoder
        import unittest.case
        checked = 0
        for mod in (asyncio.base_events, json.decoder, unittest.case, threading, os):
            with open(mod.__file__, encoding="utf-8") as src:
                top = compile(src.read(), mod.__file__, "exec")
            for code in all_code_objects(top):
                for start, end, line in code.co_lines():
                    for addr in range(start, end, 2):
                        got = m.linetable_line(code.co_linetable, code.co_firstlineno, addr)
                        want = -1 if line is None else line
                        if got != want:
                            self.fail("%s %s addr %d: decoded line %d, co_lines says %d" %
                                      (mod.__name__, code_name(code), addr, got, want))
                        checked += 1
                past_end = len(code.co_code)
                self.assertEqual(m.linetable_line(code.co_linetable, code.co_firstlineno,
                                                  past_end), -1)
                self.assertEqual(m.linetable_line(code.co_linetable, code.co_firstlineno, -2),
                                 code.co_firstlineno)
        self.assertGreater(checked, 10000)


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(sys.version_info >= (3, 12), "code watchers appeared in CPython 3.12")
class CodeWatcherTest(unittest.TestCase):
    """The code-watcher guard (python_frames.cpp): each scenario in a fresh interpreter."""

    def run_child(self, scenario):
        child = os.path.join(os.path.dirname(THIS_FILE), "code_watcher_child.py")
        r = subprocess.run([sys.executable, child, scenario], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "ok"), r.stderr)

    def test_a_process_that_never_captures_registers_no_watcher(self):
        self.run_child("never_captured")

    def test_reused_address_reports_the_new_function_before_and_after_registration(self):
        self.run_child("before_and_after")

    def test_a_program_code_watcher_still_gets_its_events(self):
        self.run_child("program_watcher")

    def test_no_free_watcher_slot_keeps_the_exact_guard(self):
        self.run_child("slots_full")

    def test_thread_stack_cache_hits_and_never_answers_for_a_dead_code_object(self):
        self.run_child("cached_stacks")

