"""Turns bench/torch_overhead.py's JSON lines into a markdown table (median over rounds)."""
import collections
import json
import statistics
import sys

rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        rows[r["label"]].append(r)
if "baseline" not in rows:
    sys.exit("no baseline run in " + sys.argv[1])
base_call = statistics.median(r["per_call_us"] for r in rows["baseline"])
base_step = statistics.median(r["step_ms"] for r in rows["baseline"])
print("| configuration | runs | all_reduce 8 B, µs/call (median) | added µs/call | step ms (median) | step vs baseline |")
print("|---|---|---|---|---|---|")
for label in ["baseline", "flight-recorder", "lockstep-none", "lockstep-native", "lockstep-python"]:
    if label not in rows:
        print(f"| {label} | 0 | (did not run) | | | |")
        continue
    c = statistics.median(r["per_call_us"] for r in rows[label])
    s = statistics.median(r["step_ms"] for r in rows[label])
    print(f"| {label} | {len(rows[label])} | {c:.2f} | {c - base_call:+.2f} | {s:.3f} | {100 * (s / base_step - 1):+.2f}% |")
