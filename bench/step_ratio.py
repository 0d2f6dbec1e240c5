"""Step-time ratios with bootstrap 95% intervals, from bench/step_overhead.py's JSON lines.

  python3 bench/step_ratio.py steps.jsonl [more.jsonl ...]

Per label, every configuration is compared with the label's baseline ("paused" for the
in-process lockstep A/B, "off" for the Flight Recorder children). The steps of each pair (one
block of every configuration run back to back, or one child process per side) are averaged per
configuration; the ratio is the sum over pairs of the configuration's means over the sum of the
baseline's, and its interval comes from 5,000 resamples of the pairs (percentile bootstrap,
fixed seed). Both the step time (`ms`, ends after torch.cuda.synchronize) and the host issue
time (`issue_ms`, until the step's last call returned) are compared. Prints a Markdown table,
then, for steps that carry the recorder's profile counters (step_overhead.py --profile 1), a
second one: per configuration, the mean per step of each counted part, in µs of the TSC (its
rate taken from the TSC ticks over each step's wall time).
"""
import collections
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
    rows = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    for run, path in enumerate(sys.argv[1:]):
        for line in open(path):
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
        base = next((b for b in BASELINES if b in configs), None)
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


def profile_table(rows):
    parts = [("op_begin_ticks", "op_begin"), ("op_end_ticks", "op_end"),
             ("unwind_ticks", "native unwind"), ("python_ticks", "Python frames"),
             ("submit_ticks", "stack hash/submit"), ("event_ticks", "completion"),
             ("event_record_ticks", "of which cuEventRecord"),
             ("capture_ticks", "capture query"), ("row_push_ticks", "op row push"),
             ("wait_ticks", "runtime-call rows")]
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
                      + " | unwind frames / stack | Python frames / stack | new stacks / step |")
                print("|---|---|---|---|---|" + "---|" * (len(parts) + 3))
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
                  f"| {mean('submits'):.1f} |")


if __name__ == "__main__":
    main()
