"""Step-time ratios with bootstrap 95% intervals, from bench/step_overhead.py's JSON lines.

  python3 bench/step_ratio.py steps.jsonl [more.jsonl ...]

For each label, the steps of each pair (a block of both sides run back to back, or a pair of
child processes) are averaged per side; the ratio is sum over pairs of side A's means / side
B's means (A = "recording" or "fr", B = "paused" or "off"), and its interval comes from 5,000
resamples of the pairs (percentile bootstrap, fixed seed). Prints a Markdown table.
"""
import collections
import json
import random
import statistics
import sys

SIDES = {"recording": "paused", "fr": "off"}


def main():
    rows = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    for path in sys.argv[1:]:
        for line in open(path):
            if line.startswith("{"):
                r = json.loads(line)
                rows[r["label"]][r["pair"]][r["config"]].append(r["ms"])
    print("| run | A vs B | pairs | steps per side | median step A, ms | median step B, ms "
          "| A/B − 1 | 95% interval |")
    print("|---|---|---|---|---|---|---|---|")
    rng = random.Random(15)
    for label, pairs in rows.items():
        a_name = next((a for a in SIDES if any(a in p for p in pairs.values())), None)
        if a_name is None:
            continue
        b_name = SIDES[a_name]
        means = [(statistics.fmean(p[a_name]), statistics.fmean(p[b_name]))
                 for p in pairs.values() if p.get(a_name) and p.get(b_name)]
        if len(means) < 2:
            continue
        ratio = lambda ms: sum(a for a, _ in ms) / sum(b for _, b in ms)
        boot = sorted(ratio([rng.choice(means) for _ in means]) for _ in range(5000))
        lo, hi = boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]
        all_a = [m for p in pairs.values() for m in p.get(a_name, [])]
        all_b = [m for p in pairs.values() for m in p.get(b_name, [])]
        print(f"| {label} | {a_name} vs {b_name} | {len(means)} | {len(all_a)} | "
              f"{statistics.median(all_a):.2f} | {statistics.median(all_b):.2f} | "
              f"{(ratio(means) - 1) * 100:+.2f}% | [{(lo - 1) * 100:+.2f}%, {(hi - 1) * 100:+.2f}%] |")


if __name__ == "__main__":
    main()
