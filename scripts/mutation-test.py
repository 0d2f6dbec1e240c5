#!/usr/bin/env python3
"""Mutation testing of lockstep (on demand, not in CI; docs/testing.md).

Each mutant of scripts/mutation-test-mutants.txt (a realistic one-line bug in the analyzer,
model checker, CLI or recorder) is applied to a scratch copy of the tree (build-mutation/tree,
built in build-mutation/tree/build with ccache: unchanged files are cache hits), the targets of
its component are rebuilt, the ctest labels of its component run, and the file is restored.
A mutant is killed when a test that passes on the unmutated tree fails (or the build breaks);
it survives when every such test still passes. Prints the score and the survivors; mutants
with a `why:` are accepted survivors (equivalent, or not observable) and are named apart.

  scripts/mutation-test.py                       # every mutant
  scripts/mutation-test.py --component analyzer  # one component
  scripts/mutation-test.py --only inv-early-late-swapped,div-causal-order-le
  scripts/mutation-test.py --list
  scripts/mutation-test.py --only div-causal-order-le --targets analyzer_survivor_tests --tests Survivors
  scripts/mutation-test.py --own-tests            # each mutant against its `tests:` selection only
A mutant's optional `tests:` line is a ctest -R regex of the tests written to kill it; with
--own-tests the mutants that have one run only those (a cheap run on a small machine; mutants
without one are skipped), and the score printed is over that selection, not the whole suite.
Results are appended, one JSON line per mutant, to build-mutation/results.jsonl.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTANTS = os.path.join(ROOT, "scripts", "mutation-test-mutants.txt")

# Per component: the targets to rebuild and the ctest selection to run.
COMPONENTS = {
    "analyzer": {
        "targets": ["lockstep_cli", "analyzer_tests", "analyzer_evidence_tests", "analyzer_survivor_tests", "cli_tests", "cli_survivor_tests", "cli_hostile_tests",
                    "timeline_tests"],
        "ctest": ["-L", "analyzer|cli|timeline|flightrec", "-LE", "e2e|fuzz"],
    },
    "model": {
        "targets": ["lockstep_cli", "model_check_test", "replay_test", "cli_tests"],
        "ctest": ["-L", "replay|cli", "-LE", "e2e|fuzz"],
    },
    "cli": {
        "targets": ["lockstep_cli", "cli_tests", "cli_survivor_tests", "cli_hostile_tests", "replay_test"],
        "ctest": ["-L", "cli|timeline|replay", "-LE", "e2e|fuzz"],
    },
    "recorder": {
        "targets": ["lockstep", "recorder_test", "recorder_unit_test", "recorder_fixture_test", "recorder_fault_test",
                    "lockstep_fixture_libs"],
        "ctest": ["-L", "recorder"],
    },
}


def parse_mutants(path):
    mutants, cur = [], None
    for raw in open(path, encoding="utf-8"):
        line = raw.rstrip("\n")
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith("[") and line.endswith("]"):
            cur = {"name": line[1:-1]}
            mutants.append(cur)
            continue
        key, _, value = line.partition(": ")
        if cur is None or key not in ("file", "find", "replace", "component", "why", "tests"):
            sys.exit(f"mutation-test: bad line in {path}: {line}")
        cur[key] = value
    for m in mutants:
        for k in ("file", "find", "replace", "component"):
            if k not in m:
                sys.exit(f"mutation-test: mutant {m['name']} has no {k}")
        if m["component"] not in COMPONENTS:
            sys.exit(f"mutation-test: mutant {m['name']}: unknown component {m['component']}")
    return mutants


def sh(cmd, cwd, timeout=None, log=None):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True,
                       errors="replace")
    if log:
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{p.stdout}\n")
    return p


def sync_tree(tree):
    """Copies the working tree's tracked and untracked (not ignored) files to `tree`."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           stdout=subprocess.PIPE).stdout.decode().split("\0")
    for f in filter(None, files):
        src, dst = os.path.join(ROOT, f), os.path.join(tree, f)
        if not os.path.isfile(src) or os.path.islink(src):
            continue
        if os.path.exists(dst) and open(src, "rb").read() == open(dst, "rb").read():
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)  # a fresh mtime: make rebuilds what a killed run left mutated


def failing_tests(build, ctest_args, log, timeout):
    """Runs the selection; returns (passed, failed) test-name sets."""
    p = sh(["ctest", "--timeout", "120", "-j2"] + ctest_args + ["--output-junit", "mutation-junit.xml"], build,
           timeout=timeout, log=log)
    passed, failed = set(), set()
    for line in p.stdout.splitlines():
        # "  1/20 Test  #3: analyzer.Divergence.x ......   Passed    0.01 sec"
        if " Test " in line and "#" in line and ("Passed" in line or "Failed" in line or "Not Run" in line
                                                 or "Exception" in line or "Timeout" in line):
            name = line.split(":", 1)[1].strip().split(" ")[0]
            (passed if "Passed" in line else failed).add(name)
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--component", action="append", help="only mutants of this component (repeatable)")
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--work", default=os.path.join(ROOT, "build-mutation"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--test-timeout", type=int, default=900, help="seconds for one mutant's ctest run")
    ap.add_argument("--targets", help="comma-separated targets to rebuild instead of the component's (a quick check)")
    ap.add_argument("--tests", help="ctest -R regex to run instead of the component's labels (with --targets)")
    ap.add_argument("--own-tests", action="store_true",
                    help="run each mutant against its own `tests:` regex only (mutants without one are skipped)")
    a = ap.parse_args()
    if a.targets or a.tests:
        for c in COMPONENTS.values():
            if a.targets:
                c["targets"] = a.targets.split(",")
            if a.tests:
                c["ctest"] = ["-R", a.tests]
    mutants = parse_mutants(MUTANTS)
    if a.component:
        mutants = [m for m in mutants if m["component"] in a.component]
    if a.only:
        want = set(a.only.split(","))
        mutants = [m for m in mutants if m["name"] in want]
    if a.own_tests:
        mutants = [m for m in mutants if "tests" in m]
    if a.list:
        for m in mutants:
            print(f"{m['name']:40} {m['component']:9} {m['file']}")
        return 0
    tree, build = os.path.join(a.work, "tree"), os.path.join(a.work, "tree", "build")
    log = os.path.join(a.work, "mutation.log")
    results = os.path.join(a.work, "results.jsonl")
    os.makedirs(tree, exist_ok=True)
    sync_tree(tree)
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        launcher = ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
        p = sh(["cmake", "-S", tree, "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DLOCKSTEP_BUILD_BENCH=OFF"]
               + launcher, tree, log=log)
        if p.returncode:
            print(p.stdout[-3000:])
            return 2
    comps = sorted({m["component"] for m in mutants})

    def selection(m):
        """The ctest arguments a mutant runs, and its baseline key."""
        if a.own_tests:
            return ["-R", m["tests"]], (m["component"], m["tests"])
        return COMPONENTS[m["component"]]["ctest"], (m["component"], "")

    baseline = {}
    for c in comps:
        p = sh(["cmake", "--build", build, "-j", str(a.jobs), "--target"] + COMPONENTS[c]["targets"], tree, log=log)
        if p.returncode:
            print(f"mutation-test: the unmutated tree does not build for {c}:\n{p.stdout[-3000:]}")
            return 2
    for m in mutants:
        ctest_args, key = selection(m)
        if key in baseline:
            continue
        t0 = time.monotonic()
        passed, failed = failing_tests(build, ctest_args, log, a.test_timeout)
        baseline[key] = passed
        print(f"baseline {key[0]} {key[1] or '(labels)'}: {len(passed)} tests pass, {len(failed)} fail/not built "
              f"(ignored) [{time.monotonic() - t0:.0f}s]", flush=True)
        if not passed:
            print(f"mutation-test: no test of {key} passes on the unmutated tree; see {log}")
            return 2
    killed, survived, accepted, skipped = [], [], [], []
    for m in mutants:
        path = os.path.join(tree, m["file"])
        text = open(path, encoding="utf-8").read()
        n = text.count(m["find"])
        if n != 1:
            skipped.append((m, f"find text occurs {n} times"))
            print(f"SKIP     {m['name']}: find text occurs {n} times in {m['file']}", flush=True)
            continue
        t0 = time.monotonic()
        c = COMPONENTS[m["component"]]
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace(m["find"], m["replace"]))
            p = sh(["cmake", "--build", build, "-j", str(a.jobs), "--target"] + c["targets"], tree, log=log)
            if p.returncode:
                outcome, detail = "killed", "build fails"
            else:
                ctest_args, key = selection(m)
                passed, failed = failing_tests(build, ctest_args, log, a.test_timeout)
                newly = sorted(baseline[key] & failed)
                outcome, detail = ("killed", ", ".join(newly[:3]) + (" ..." if len(newly) > 3 else "")) if newly else ("survived", "")
        except subprocess.TimeoutExpired:
            outcome, detail = "killed", "tests time out"
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        secs = time.monotonic() - t0
        if outcome == "killed":
            killed.append(m)
        elif "why" in m:
            accepted.append(m)
        else:
            survived.append(m)
        label = outcome.upper() if outcome == "killed" or "why" not in m else "ACCEPTED"
        print(f"{label:8} {m['name']}: {detail} [{secs:.0f}s]", flush=True)
        with open(results, "a") as f:
            f.write(json.dumps({"name": m["name"], "component": m["component"], "outcome": outcome,
                                "detail": detail, "seconds": round(secs), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    # Restore the build of the unmutated files for the next run.
    for comp in comps:
        sh(["cmake", "--build", build, "-j", str(a.jobs), "--target"] + COMPONENTS[comp]["targets"], tree, log=log)
    scored = len(killed) + len(survived) + len(accepted)
    if scored:
        print(f"\nmutation score: {len(killed)}/{scored} killed = {100.0 * len(killed) / scored:.0f}%"
              f" (excluding {len(accepted)} accepted: {100.0 * len(killed) / max(1, scored - len(accepted)):.0f}%)")
    for m in survived:
        print(f"  survivor: {m['name']} ({m['file']}: {m['find']!r} -> {m['replace']!r})")
    for m in accepted:
        print(f"  accepted: {m['name']}: {m['why']}")
    for m, why in skipped:
        print(f"  skipped: {m['name']}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
