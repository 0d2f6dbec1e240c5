"""The four-arm table of `bench/step_overhead.py --ab four` (issue 31): step time of each arm
over "neither", with 95% bootstrap intervals.

    python3 bench/four_arm.py steps.jsonl [more.jsonl ...]

Arms: neither (Flight Recorder 0 entries, lockstep paused), fr (Flight Recorder default, lockstep
paused), lockstep (Flight Recorder 0, lockstep recording), both. The Flight Recorder is set per
process, lockstep per step, so:
- lockstep (and lockstep on top of the Flight Recorder): paired within each process, the ratio of
  summed recording steps over summed paused steps of the same pairs;
- fr and both: between processes, the mean step of the fr processes' arm over the mean paused
  step of the off processes.
Intervals: 5,000 resamples, processes drawn with replacement within each side, then pairs within
each drawn process (hierarchical bootstrap: process-to-process variance included). The last row
compares the two tools' costs directly (lockstep − fr, percentage points).

Several files are several runs (another machine, another day: each has its own "neither"): each
run's arms are compared within the run, and the runs' estimates are combined weighted by their
processes (a stratified estimate; the bootstrap resamples processes within each run). A line per
run precedes the table.
"""
import gzip
import json
import random
import statistics
import sys


def load(paths):
    procs = {}  # (file, proc) -> {"fr": bool, "pairs": {pair: {arm: ms}}, "entries": n}
    for fi, path in enumerate(paths):
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if "lockstep" not in r or "proc" not in r:
                    continue
                p = procs.setdefault((fi, r["proc"]), {"fr": r["fr"], "pairs": {}, "file": fi,
                                                      "entries": r.get("fr_entries")})
                p["pairs"].setdefault(r["pair"], {})[r["lockstep"]] = r["ms"]
    for p in procs.values():
        p["pairs"] = [v for v in p["pairs"].values() if "recording" in v and "paused" in v]
    return [p for p in procs.values() if p["pairs"]]


def sums(pairs):
    return sum(v["recording"] for v in pairs), sum(v["paused"] for v in pairs)


def estimates(fr_procs, off_procs):
    """(lockstep, fr, both, lockstep over fr) as ratios − 1 for one (re)sample."""
    rec_off, pau_off = map(sum, zip(*(sums(p) for p in off_procs)))
    rec_fr, pau_fr = map(sum, zip(*(sums(p) for p in fr_procs)))
    n_off = sum(len(p) for p in off_procs)
    n_fr = sum(len(p) for p in fr_procs)
    neither = pau_off / n_off
    return {"lockstep": rec_off / pau_off - 1, "fr": (pau_fr / n_fr) / neither - 1,
            "both": (rec_fr / n_fr) / neither - 1, "lockstep_on_fr": rec_fr / pau_fr - 1}


def pooled(runs):
    """Estimates of several runs, each (fr, off) compared within itself, weighted by processes."""
    per = [(estimates(fr, off), len(fr) + len(off)) for fr, off in runs]
    total = sum(w for _, w in per)
    return {k: sum(e[k] * w for e, w in per) / total for k in per[0][0]}


def main():
    procs = load(sys.argv[1:])
    fr = [p["pairs"] for p in procs if p["fr"]]
    off = [p["pairs"] for p in procs if not p["fr"]]
    runs = []
    for fi in range(len(sys.argv) - 1):
        r_fr = [p["pairs"] for p in procs if p["fr"] and p["file"] == fi]
        r_off = [p["pairs"] for p in procs if not p["fr"] and p["file"] == fi]
        if not r_fr or not r_off:
            print("need processes of both sides in every run:", sys.argv[1 + fi])
            return 1
        runs.append((r_fr, r_off))
    point = pooled(runs)
    rng = random.Random(31)
    draws = {k: [] for k in point}
    diff = []
    for _ in range(5000):
        rs = lambda side: [[rng.choice(ps) for _ in ps] for ps in (rng.choice(side) for _ in side)]
        e = pooled([(rs(r_fr), rs(r_off)) for r_fr, r_off in runs])
        for k, v in e.items():
            draws[k].append(v)
        diff.append(e["lockstep"] - e["fr"])
    if len(runs) > 1:
        for fi, (r_fr, r_off) in enumerate(runs):
            e = estimates(r_fr, r_off)
            print(f"run {fi + 1} ({sys.argv[1 + fi]}): {len(r_fr)} / {len(r_off)} processes; Flight Recorder "
                  f"{100 * e['fr']:+.2f} %, lockstep {100 * e['lockstep']:+.2f} %, difference "
                  f"{100 * (e['lockstep'] - e['fr']):+.2f} points")
        print()

    def ci(v):
        v = sorted(v)
        return v[int(0.025 * len(v))], v[int(0.975 * len(v)) - 1]

    med = lambda side, arm: statistics.median(x[arm] for ps in side for x in ps)
    entries = sorted({p["entries"] for p in procs if p["fr"]}, key=str)
    entries_off = sorted({p["entries"] for p in procs if not p["fr"]}, key=str)
    print(f"processes: {len(fr)} with the Flight Recorder (entries held: {entries}), {len(off)} "
          f"without (entries: {entries_off}); step pairs: {sum(map(len, fr))} / {sum(map(len, off))}")
    print()
    print("| arm | what it records | median step, ms | step time vs neither [95 %] | how compared |")
    print("|---|---|---|---|---|")
    rows = [("neither", "nothing", med(off, "paused"), None, "baseline"),
            ("Flight Recorder default", "last 2,000 collectives, Python frames, no native frames, in memory",
             med(fr, "paused"), "fr", "between processes"),
            ("lockstep, Python stacks", "every NCCL call, Python + native frames, on disk",
             med(off, "recording"), "lockstep", "paired, within processes"),
            ("both", "both of the above", med(fr, "recording"), "both", "between processes")]
    for name, what, m, key, how in rows:
        if key is None:
            print(f"| {name} | {what} | {m:.1f} | — | {how} |")
            continue
        lo, hi = ci(draws[key])
        print(f"| {name} | {what} | {m:.1f} | {100 * point[key]:+.2f} % [{100 * lo:+.2f} %, "
              f"{100 * hi:+.2f} %] | {how} |")
    lo, hi = ci(draws["lockstep_on_fr"])
    print(f"| lockstep on top of the Flight Recorder | | | {100 * point['lockstep_on_fr']:+.2f} % "
          f"[{100 * lo:+.2f} %, {100 * hi:+.2f} %] | paired, within processes |")
    lo, hi = ci(diff)
    d = point["lockstep"] - point["fr"]
    print(f"| lockstep − Flight Recorder | | | {100 * d:+.2f} points [{100 * lo:+.2f}, {100 * hi:+.2f}] | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
