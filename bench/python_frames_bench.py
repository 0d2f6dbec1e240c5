"""Cost of lockstep's Python frame capture (interposer/python_frames), as the NCCL hook pays it.

Timings only, never pass/fail. Needs the test extension built by tests/python:
  cmake --build build-python --target pyframes_testmod_py311
  PYTHONPATH=build-python/tests/python/py311 python3 bench/python_frames_bench.py
With CPython 3.12+ it also times the exact guard against the code-watcher guard (same run,
alternating), and the interning walk against the thread stack cache with code objects dying. Figures are recorded in docs/python-frames.md.
"""
import statistics
import sys
import timeit

import lockstep_pyframes_test as m

DEPTH = 30          # Python frames on the stack at the capture point (the bench's own included)
ITERATIONS = 200_000
REPEATS = 5


def at_depth(depth, fn):
    """Calls fn() with exactly `depth` Python frames on the stack (counting fn's caller)."""
    def recurse(n):
        return fn() if n <= 1 else recurse(n - 1)
    base = len(_stack())
    return recurse(depth - base - 1)  # the lambda passed as fn is one more frame


def _stack():
    f, out = sys._getframe(1), []
    while f:
        out.append(f)
        f = f.f_back
    return out


def best_ns(resolve, max_frames=64):
    runs = [at_depth(DEPTH, lambda: m.bench(ITERATIONS, max_frames, resolve)) for _ in range(REPEATS)]
    frames = runs[0][1]
    return min(r[0] for r in runs), statistics.median(r[0] for r in runs), frames


def first_sight_ns(count=2000):
    """One capture whose innermost frame is a code object never seen before (it gets interned)
    vs. the same capture again (steady state)."""
    fresh, again = [], []
    for i in range(count):
        ns = {}
        exec(compile("def f%d(m):\n    return m.bench(1, 1), m.bench(1, 1)\n" % i,
                     "<bench%d>" % i, "exec"), ns)
        (t_new, _), (t_old, _) = ns["f%d" % i](m)
        fresh.append(t_new)
        again.append(t_old)
        ns.clear()
    return statistics.median(fresh), statistics.median(again)


def python_walk_ns():
    """For scale: the same stack read by Python itself (GIL held), sys._getframe + f_lineno."""
    def walk():
        f = sys._getframe()
        while f:
            f.f_code.co_filename, f.f_code.co_qualname, f.f_lineno
            f = f.f_back
    n = 20_000
    return at_depth(DEPTH, lambda: timeit.timeit(walk, number=n)) / n * 1e9


def guards():
    """The exact guard against the code-watcher guard (3.12+), alternating in this process."""
    m.capture(max=1)  # the first capture asks for the watcher; the main thread registers it
    sum(range(100_000))
    print("guard: %s" % m.guard_status())
    if not m.guard_status().startswith("code watcher"):
        return
    res = {"exact": [], "watcher": []}
    for _ in range(3):
        for name, exact in (("exact", True), ("watcher", False)):
            m.exact_guard(exact)
            res[name].append(best_ns(resolve=False))
    m.exact_guard(False)
    for name, runs in res.items():
        frames = runs[0][2]
        best = min(r[0] for r in runs)
        print("capture + hash, %d frames, %-7s guard: best %7.0f ns  median %7.0f ns  (%.1f ns/frame)"
              % (frames, name, best, statistics.median(r[1] for r in runs), best / frames))


def walk_vs_cache(dying_per_capture):
    """The hook's two ways to read the stack (3.12+, code watcher): the interning walk (+ the
    content hash the memo keys on) and the thread stack cache, alternating; with
    `dying_per_capture` code objects dying between captures (exec'd code, as generated code
    does), 200 captures at a time. ns per capture, median of rounds."""
    if not hasattr(m, "bench_cached") or not m.guard_status().startswith("code watcher"):
        return
    res = {"walk": [], "cache": []}
    for _ in range(REPEATS):
        for name in ("walk", "cache"):
            def run():
                total = 0.0
                for i in range(200):
                    for j in range(dying_per_capture):
                        ns = {}
                        exec(compile("def d():\n    return %d\n" % j, "<dying>", "exec"), ns)
                        ns.clear()
                    t = m.bench(1)[0] if name == "walk" else m.bench_cached(1)[0]
                    total += t
                return total / 200
            res[name].append(at_depth(DEPTH, run))
    print("walk vs stack cache, %d frames, %d code objects dying per capture: walk %5.0f ns, cache %5.0f ns"
          % (DEPTH, dying_per_capture, statistics.median(res["walk"]), statistics.median(res["cache"])))


def main():
    print("python %s, %s" % (sys.version.split()[0], m.status()))
    if hasattr(m, "guard_status"):
        guards()
        for dying in (0, 1, 10):
            walk_vs_cache(dying)
    best, med, frames = best_ns(resolve=False)
    print("capture + hash, %d frames:            best %7.0f ns  median %7.0f ns  (%.1f ns/frame)"
          % (frames, best, med, best / frames))
    best, med, frames = best_ns(resolve=True)
    print("capture + hash + resolve, %d frames:  best %7.0f ns  median %7.0f ns  (%.1f ns/frame)"
          % (frames, best, med, best / frames))
    best, med, frames = best_ns(resolve=False, max_frames=8)
    print("capture + hash, innermost %d frames:   best %7.0f ns  median %7.0f ns" % (frames, best, med))
    new, old = first_sight_ns()
    print("1-frame capture, code object new:     median %7.0f ns (interning); already seen: %.0f ns"
          % (new, old))
    print("Python's own walk (sys._getframe, f_lineno), %d frames: %.0f ns" % (DEPTH, python_walk_ns()))


if __name__ == "__main__":
    main()
