"""Markdown tables from bench/nccl_call_overhead.cpp's JSON lines: per-call cost (median of the
per-run medians, mode "plain") and, when present, the per-part breakdown (mode "parts")."""
import collections
import json
import statistics
import sys

runs = collections.defaultdict(list)
parts = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    mode = r.get("mode", "plain")
    if mode == "plain":
        runs[r["label"]].append(r)
    elif mode == "parts":
        parts[r["stacks"]][r["label"]] = r["median_ns"]
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
for stacks, p in parts.items():
    if "full" not in p:
        continue
    print(f"\nParts, stacks={stacks} (one process, alternating; part = full − without it):\n")
    print("| configuration | ns/call | part, ns |")
    print("|---|---|---|")
    for label, ns in p.items():
        part = "" if label == "full" else f"{p['full'] - ns:+.0f}"
        print(f"| {label} | {ns:.0f} | {part} |")
