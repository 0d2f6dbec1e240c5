"""Child process of test_python_frames.CodeWatcherTest: one scenario per run, in a fresh
interpreter (the code watcher is registered once per process). Prints "ok" or raises.
Run: PYTHONPATH=<dir of lockstep_pyframes_test*.so> python code_watcher_child.py <scenario>
"""
import sys

import lockstep_pyframes_test as m


def drain():
    """Lets the main thread run pending calls (the watcher registers in one)."""
    for _ in range(1000):
        sum(range(10))


def reuse_reports_the_new_function(tag):
    """Code objects freed and new ones made, often at the same address: each capture must name
    the new function and its line. Returns how many addresses were reused."""
    seen, reused = set(), 0
    for i in range(400):
        name = "%s_f%d" % (tag, i % 3)
        src = "def %s(m):\n" % name + "    x = 1\n" * (i % 7) + "    return m.capture(max=1)\n"
        ns = {}
        exec(compile(src, "<%s>" % tag, "exec"), ns)
        code_id = id(ns[name].__code__)
        reused += code_id in seen
        seen.add(code_id)
        got = ns[name](m)
        want = [("<%s>" % tag, name, 2 + i % 7)]
        assert got == want, "iteration %d: %r != %r (%s)" % (i, got, want, m.guard_status())
        ns.clear()
    assert reused > 0, "no code object address was reused: guard not exercised"
    return reused


def cached_capture_site(m):
    return m.capture_cached(), m.capture()


def cached_reuse_reports_the_new_function(tag):
    """As reuse_reports_the_new_function, through the thread stack cache: a new code object at a
    dead one's address, at the same instruction, gives the same frame words; the cache must not
    answer with the dead function."""
    seen, reused = set(), 0
    for i in range(400):
        name = "%s_f%d" % (tag, i % 3)
        src = "def %s(m):\n" % name + "    x = 1\n" * (i % 7) + "    return m.capture_cached(1)\n"
        ns = {}
        exec(compile(src, "<%s>" % tag, "exec"), ns)
        code_id = id(ns[name].__code__)
        reused += code_id in seen
        seen.add(code_id)
        for _ in range(2):  # the second: a hit on the entry the first made
            sid, got = ns[name](m)
            want = [("<%s>" % tag, name, 2 + i % 7)]
            assert got == want, "iteration %d: %r != %r" % (i, got, want)
            assert sid != 0, "not cached under the code watcher"
        ns.clear()
    assert reused > 0, "no code object address was reused: cache not exercised"


def main(scenario):
    if scenario == "never_captured":
        # A process that never captures never registers a watcher.
        slots = m.free_code_watcher_slots()
        drain()
        assert m.free_code_watcher_slots() == slots, "a watcher appeared without any capture"
        assert m.guard_status().startswith("exact guard: no capture"), m.guard_status()
    elif scenario == "before_and_after":
        slots = m.free_code_watcher_slots()
        m.allow_code_watcher(False)
        reuse_reports_the_new_function("before")
        drain()
        assert m.guard_status().startswith("exact guard"), m.guard_status()
        assert m.free_code_watcher_slots() == slots
        m.allow_code_watcher(True)
        m.capture(max=1)
        drain()
        assert m.guard_status().startswith("code watcher"), m.guard_status()
        assert m.free_code_watcher_slots() == slots - 1, "expected one slot taken by lockstep"
        reuse_reports_the_new_function("after")
        # Entries interned before registration are refreshed and still right.
        reuse_reports_the_new_function("before")
    elif scenario == "program_watcher":
        # The program's own code watcher, registered before ours, keeps getting its events.
        wid = m.add_counting_watcher()
        m.capture(max=1)
        drain()
        assert m.guard_status().startswith("code watcher"), m.guard_status()
        c0, d0 = m.counting_watcher_events()
        ns = {}
        exec(compile("def g(m):\n    return m.capture(max=1)\n", "<own>", "exec"), ns)
        assert ns["g"](m) == [("<own>", "g", 2)]
        ns.clear()
        c1, d1 = m.counting_watcher_events()
        assert c1 > c0 and d1 > d0, (c0, d0, c1, d1)
        assert wid >= 0
    elif scenario == "slots_full":
        # Every slot taken by the program: lockstep keeps the exact guard and stays right.
        ids = []
        while True:
            try:
                ids.append(m.add_counting_watcher())
            except RuntimeError:  # "no more code watcher IDs available"
                break
        m.capture(max=1)
        drain()
        assert m.guard_status().startswith("exact guard: no free code watcher slot"), m.guard_status()
        reuse_reports_the_new_function("full")
    elif scenario == "cached_stacks":
        # Before the watcher: nothing cached (id 0), frames as the interning walk's.
        m.allow_code_watcher(False)
        sid, frames = m.capture_cached()
        assert sid == 0 and frames, (sid, frames)
        m.allow_code_watcher(True)
        m.capture(max=1)
        drain()
        assert m.guard_status().startswith("code watcher"), m.guard_status()
        ids = []
        for _ in range(3):
            (sid, frames), plain = cached_capture_site(m)
            # capture() runs one line below capture_cached(): compare everything but that line
            assert [f[:2] for f in frames] == [f[:2] for f in plain], (frames, plain)
            assert frames[1:] == plain[1:], (frames, plain)
            ids.append(sid)
        assert ids[0] != 0 and ids[0] == ids[1] == ids[2], ids
        sid_other_line, _ = m.capture_cached()
        assert sid_other_line not in (0, ids[0]), (sid_other_line, ids)
        # Code objects dying elsewhere (exec'd code, as generated code does) leave the stack
        # cached: only a death in one of its frames' address buckets makes it proven again
        # (1 in 65,536 per frame and death: a few trials may miss, most must hit).
        first, hits = None, 0
        for trial in range(11):
            for i in range(3):
                ns = {}
                exec(compile("def g%d():\n    return %d\n" % (i, trial), "<dying>", "exec"), ns)
                ns.clear()
            (sid, _), _ = cached_capture_site(m)
            assert sid != 0, "not cached under the code watcher"
            if first is None:
                first = sid  # this call site's stack, proven now
            else:
                hits += sid == first
        assert hits >= 8, "the stack was proven again after unrelated code objects died: %d of 10 hits" % hits
        cached_reuse_reports_the_new_function("cached")
    else:
        raise SystemExit("unknown scenario " + scenario)
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
