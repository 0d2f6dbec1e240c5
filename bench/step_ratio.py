"""Step-time ratios with bootstrap 95% intervals, from bench/step_overhead.py's JSON lines.

  python3 bench/step_ratio.py [--base CONFIG] steps.jsonl [more.jsonl ...]

Per label, every configuration is compared with the label's baseline ("paused" for the
in-process lockstep A/B, "off" for the Flight Recorder children; --base names another, e.g.
no-stacks to see what the stacks add). Files are pooled: their pairs are numbered per file. The
steps of each pair (one block of every configuration run back to back, or one child process per
side) are averaged per
configuration; the ratio is the sum over pairs of the configuration's means over the sum of the
baseline's, and its interval comes from 5,000 resamples of the pairs (percentile bootstrap,
fixed seed). Both the step time (`ms`, ends after torch.cuda.synchronize) and the host issue
time (`issue_ms`, until the step's last call returned) are compared. Prints a Markdown table,
then, for steps that carry the recorder's profile counters (step_overhead.py --profile 1), a
second one: per configuration, the mean per step of each counted part, in µs of the TSC (its
rate taken from the TSC ticks over each step's wall time).
"""
import argparse
import collections
import gzip
import json
import random
import statistics
import sys

BASELINES = ("paused", "off")


def ratio_ci(means, rng):
    ratio = lambda ms: sum(a for a, _ in ms) / sum(b for _, b in ms)
    n = len(means)
    boot = sorted(ratio([means[i] for i in rng.choices(range(n), k=n)]) for _ in range(5000))
    return ratio(means), boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]


def main():
    parser = argparse.ArgumentParser(description="step-time ratios with bootstrap 95% intervals")
    parser.add_argument("--base", help="the configuration every other is compared with")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    baselines = (args.base,) if args.base else BASELINES
    rows = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    for run, path in enumerate(args.files):
        for line in (gzip.open(path, "rt") if path.endswith(".gz") else open(path)):
            if line.startswith("{"):
                r = json.loads(line)
                # Pairs are numbered per run: pair 0 of two files is two pairs.
                rows[r["label"]][(run, r["pair"])][r["config"]].append(r)
    print("| run | configuration vs baseline | pairs | steps each | median step, ms (config / base) "
          "| step time ratio − 1 [95% interval] | host issue time ratio − 1 [95% interval] |")
    print("|---|---|---|---|---|---|---|")
    rng = random.Random(15)
    for label, pairs in rows.items():
        configs = sorted({c for p in pairs.values() for c in p})
        base = next((b for b in baselines if b in configs), None)
        if base is None:
            continue
        for conf in configs:
            if conf == base:
                continue
            both = [p for p in pairs.values() if p.get(conf) and p.get(base)]
            if len(both) < 2:
                continue
            cells = []
            for key in ("ms", "issue_ms"):
                if not all(key in r for p in both for r in p[conf] + p[base]):
                    cells.append("n/a")
                    continue
                means = [(statistics.fmean(r[key] for r in p[conf]),
                          statistics.fmean(r[key] for r in p[base])) for p in both]
                r, lo, hi = ratio_ci(means, rng)
                cells.append(f"{(r - 1) * 100:+.2f}% [{(lo - 1) * 100:+.2f}%, {(hi - 1) * 100:+.2f}%]")
            a = [r["ms"] for p in both for r in p[conf]]
            b = [r["ms"] for p in both for r in p[base]]
            print(f"| {label} | {conf} vs {base} | {len(both)} | {len(a)} | "
                  f"{statistics.median(a):.2f} / {statistics.median(b):.2f} | {cells[0]} | {cells[1]} |")
    profile_table(rows)
    attribution_table(rows, baselines)


def step_metrics(r, ghz):
    """Per step, µs: where the host's time went (None where the line lacks the fields)."""
    c, t = r.get("counters"), r.get("threads")
    if not c or "hook_ticks" not in c or ghz <= 0:
        return None
    us = lambda k: c.get(k, 0) / ghz / 1e3
    m = {"step": r["ms"] * 1e3, "issue": r["issue_ms"] * 1e3,
         "nccl hooks": us("hook_ticks"), "nccl real": us("real_ticks"),
         "runtime hooks": us("rt_hook_ticks"), "runtime real": us("rt_real_ticks"),
         "recorder timers": us("op_begin_ticks") + us("op_end_ticks") + us("wait_ticks")}
    m["nccl hooks − real"] = m["nccl hooks"] - m["nccl real"]
    m["runtime hooks − real"] = m["runtime hooks"] - m["runtime real"]
    m["issue outside hooks"] = m["issue"] - m["nccl hooks"] - m["runtime hooks"]
    if t is not None:
        for name, key in (("main", "main"), ("autograd", "pt_autograd_0"),
                          ("writer", "lockstep-writer"), ("watchdog", "lockstep-watch")):
            run, wait, _ = t.get(key, [0.0, 0.0, 0])
            m[f"{name} cpu"] = run
            m[f"{name} runq wait"] = wait
        known = {"main", "pt_autograd_0", "lockstep-writer", "lockstep-watch"}
        m["other threads cpu"] = sum(v[0] for k, v in t.items() if k not in known)
    return m


def attribution_table(rows, baselines):
    """Per configuration against the baseline: the mean difference per step of each metric
    (µs), with a 95% bootstrap interval over pairs."""
    rng = random.Random(15)
    printed = False
    for label, pairs in rows.items():
        recs = [r for p in pairs.values() for rs in p.values() for r in rs
                if r.get("counters") and r["ms"] > 0]
        if not recs:
            continue
        ghz = statistics.median(r["counters"].get("tsc", 0) / (r["ms"] * 1e6) for r in recs)
        configs = sorted({c for p in pairs.values() for c in p})
        base = next((b for b in baselines if b in configs), None)
        if base is None:
            continue
        for conf in configs:
            if conf == base:
                continue
            per_pair = []
            for p in pairs.values():
                a = [step_metrics(r, ghz) for r in p.get(conf, [])]
                b = [step_metrics(r, ghz) for r in p.get(base, [])]
                a, b = [x for x in a if x], [x for x in b if x]
                if a and b:
                    per_pair.append((a, b))
            if len(per_pair) < 2:
                continue
            keys = [k for k in per_pair[0][0][0] if all(k in x for a, b in per_pair for x in a + b)]
            if not printed:
                print()
                print("| run | configuration − baseline, µs per step | pairs | "
                      + " | ".join(keys) + " |")
                print("|---|---|---|" + "---|" * len(keys))
                printed = True
            cells = []
            for k in keys:
                d = [statistics.fmean(x[k] for x in a) - statistics.fmean(x[k] for x in b)
                     for a, b in per_pair]
                n = len(d)
                boot = sorted(statistics.fmean(d[i] for i in rng.choices(range(n), k=n))
                              for _ in range(2000))
                cells.append(f"{statistics.fmean(d):+.0f} [{boot[50]:+.0f}, {boot[1949]:+.0f}]")
            print(f"| {label} | {conf} − {base} | {len(per_pair)} | " + " | ".join(cells) + " |")


def profile_table(rows):
    parts = [("op_begin_ticks", "op_begin"), ("op_end_ticks", "op_end"),
             ("unwind_ticks", "native unwind"), ("python_ticks", "Python frames"),
             ("submit_ticks", "stack hash/submit"), ("event_ticks", "completion"),
             ("event_record_ticks", "of which cuEventRecord"),
             ("capture_ticks", "capture query"), ("row_push_ticks", "op row push"),
             ("wait_ticks", "runtime-call rows"), ("issue_clock_ticks", "issue clock"),
             ("call_index_ticks", "call index"), ("comm_lookup_ticks", "comm lookup"),
             ("unwind_slow_ticks", "slow unwinds")]
    printed = False
    for label, pairs in rows.items():
        by_conf = collections.defaultdict(list)
        for p in pairs.values():
            for conf, recs in p.items():
                by_conf[conf].extend(r for r in recs if r.get("counters") and r["ms"] > 0)
        for conf, recs in sorted(by_conf.items()):
            if not recs or not any(r["counters"].get("ops") for r in recs):
                continue
            if not printed:
                print()
                print("| run | configuration | steps | ops / step | waits / step | "
                      + " | ".join(f"{n}, µs/step" for _, n in parts)
                      + " | unwind frames / stack | Python frames / stack | new stacks / step "
                      "| slow unwinds / step | unwind retries / step |")
                print("|---|---|---|---|---|" + "---|" * (len(parts) + 5))
                printed = True
            ghz = statistics.median(r["counters"].get("tsc", 0) / (r["ms"] * 1e6) for r in recs)
            if ghz <= 0:
                continue
            mean = lambda k: statistics.fmean(r["counters"].get(k, 0) for r in recs)
            us = lambda k: mean(k) / ghz / 1e3
            per_stack = lambda k: mean(k) / mean("stacks") if mean("stacks") else 0.0
            print(f"| {label} | {conf} | {len(recs)} | {mean('ops'):.0f} | {mean('waits'):.0f} | "
                  + " | ".join(f"{us(k):.0f}" for k, _ in parts)
                  + f" | {per_stack('unwind_frames'):.1f} | {per_stack('python_frames'):.1f} "
                  f"| {mean('submits'):.1f} | {mean('unwind_slow'):.1f} | {mean('unwind_retries'):.2f} |")


if __name__ == "__main__":
    main()
