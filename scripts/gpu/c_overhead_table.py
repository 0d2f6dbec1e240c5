"""Markdown table from bench/nccl_call_overhead.cpp's JSON lines (median of the per-run medians)."""
import collections
import json
import statistics
import sys

runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        runs[r["label"]].append(r)
if "baseline" not in runs:
    sys.exit("no baseline run")
base = statistics.median(r["median_ns"] for r in runs["baseline"])
print("| configuration | runs | ns/call, median of run medians | per-run medians | added ns/call |")
print("|---|---|---|---|---|")
for label in ["baseline", "none", "native"]:
    rs = runs.get(label, [])
    if not rs:
        print(f"| {label} | 0 | (did not run) | | |")
        continue
    m = statistics.median(r["median_ns"] for r in rs)
    each = ", ".join(f"{r['median_ns']:.0f}" for r in rs)
    name = "no recorder" if label == "baseline" else f"lockstep, stacks={label}"
    print(f"| {name} | {len(rs)} | {m:.0f} | {each} | {m - base:+.0f} |")
