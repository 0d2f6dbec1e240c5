#!/usr/bin/env python3
"""The HTML page of attach snapshots (`lockstep report SNAPDIR`, `attach --from DIR --html F`) on a
snapshot built here: 3 processes of a 4-rank job (rank 3 without snapshot), ranks 0 and 1 with
the same stack, rank 2 the odd one out, NCCL RAS counts that make ranks 0 and 1 wait for rank 2;
hostile strings in it (a bidi override in a frame, a closing script tag in a host name).
Checks: the page's Content-Security-Policy names a sha256 of each of its scripts and no
'unsafe-inline' for scripts; no raw U+202E and no raw "</script><script>" from the data; the data
blob holds the stack groups, the wait-for edges, the ranks without snapshot and each rank's
evidence; in headless Chromium the script runs to its end without an error and draws the rank
table, the odd group, the wait-for graph and rank 3 as without snapshot.

usage: report_attach_test.py LOCKSTEP"""
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from attach_checks import expect, finish

lockstep = sys.argv[1]
work = tempfile.mkdtemp(prefix="lockstep-attach-report-")
snap = os.path.join(work, "snap")
os.makedirs(snap)
RLO = "\u202e"


def thread(tid, frames):
    return {"tid": tid, "name": "seed", "state": "S", "wchan": "futex_wait_queue",
            "native": [{"ip": 4096 + i, "function": f, "function_offset": 8, "module": m, "module_offset": 16}
                       for i, (f, m) in enumerate(frames)], "native_error": "", "has_python": False,
            "gil_holder": False, "python": []}


common = [("pthread_cond_wait", "/lib/libc.so.6"), ("cuStreamSynchronize", "/opt/libcuda.so.1"), ("main", "/job/seed")]
odd = [("poll", "/lib/libc.so.6"), ("ncclAllToAll" + RLO + "evil", "/opt/libnccl.so.2"), ("main", "/job/seed")]
procs = []
for rank, frames in ((0, common), (1, common), (2, odd)):
    procs.append({"pid": 100 + rank, "host": "node</script><script>alert(1)</script>", "cmdline": ["/job/seed"],
                  "rank": rank, "world_size": 4, "error": "", "fix": "", "stopped_ms": 12.5, "threads_stopped": 1,
                  "threads": [thread(100 + rank, frames)], "python_status": "no CPython",
                  "nccl_library": "/opt/libnccl.so.2", "ras_address": "127.0.0.1:1"})
counts = {0: 5, 1: 5, 2: 4}
ras = [{"address": "127.0.0.1:1", "reached": True, "error": "", "server_protocol": 2, "nccl_version": "2.28.9",
        "json": True, "communicators": [{"hash": "0xabc", "size": 4, "missing_ranks": [], "ranks": [
            {"rank": r, "host": "node</script><script>alert(1)</script>", "pid": 100 + r, "cuda_dev": r,
             "collective_counts": {"ReduceScatter": c}} for r, c in counts.items()]}]}]
with open(os.path.join(snap, "node-1.attach.json"), "w") as f:
    json.dump({"lockstep_attach_format": 1, "host": "node", "taken_at": "2026-01-01T00:00:00Z",
               "lockstep_version": "test", "processes": procs, "ras": ras,
               # looked at twice, the same both times: the count difference is proven
               "second_look": {"taken": True, "after_ms": 1000.0, "ras": ras, "processes": procs}}, f)

page = os.path.join(work, "snap.html")
r = subprocess.run([lockstep, "report", snap, "-o", page], capture_output=True, text=True, timeout=60)
print(r.stderr)
expect(r.returncode == 0 and os.path.exists(page), f"lockstep report SNAPDIR writes the page (rc {r.returncode})")
html = open(page, encoding="utf-8").read() if os.path.exists(page) else ""

csp = re.search(r'Content-Security-Policy" content="([^"]*)"', html)
expect(csp is not None, "the page has a Content-Security-Policy")
script_src = re.search(r"script-src ([^;]*)", csp.group(1)).group(1) if csp else ""
bodies = re.findall(r"<script>(.*?)</script>", html, re.S)
hashes = {"'sha256-" + base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() + "'" for b in bodies}
expect(len(bodies) == 2 and hashes == set(script_src.split()),
       f"script-src is exactly the sha256 of the page's {len(bodies)} scripts, no 'unsafe-inline'")
expect(RLO not in html, "no raw U+202E in the page")
expect("202e" in html, "the override is shown escaped")
expect("</script><script>alert" not in html, "no script tag from the data")

blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
data = json.loads(blob.group(1)) if blob else {}
groups = data.get("stack_groups", [])
expect([g["ranks"] for g in groups] == [[0, 1], [2]], f"stack groups [0,1] and the odd one out [2]: {[g['ranks'] for g in groups]}")
expect(data.get("no_snapshot") == [3], f"rank 3 has no snapshot: {data.get('no_snapshot')}")
edges = [(e["waiter"], e["waits_for"]) for d in data.get("divergences", []) for e in d["wait_for"]]
expect(sorted(edges) == [(0, 2), (1, 2)], f"wait-for edges 0->2 and 1->2: {edges}")
expect(len(data.get("ranks", [])) == 3 and
       all(("nccl_ras", "proven") in {(e["source"], e["level"]) for e in x["evidence_sources"]} for x in data["ranks"]),
       "each of the 3 ranks read: evidence NCCL RAS, proven")
expect(data.get("exit_code") == 1, "the verdict: a divergence found")

# attach --from DIR --html FILE: the same page.
page2 = os.path.join(work, "from.html")
r = subprocess.run([lockstep, "attach", "--from", snap, "--html", page2], capture_output=True, text=True, timeout=60)
expect(r.returncode == 1 and os.path.exists(page2) and open(page2, encoding="utf-8").read() == html,
       "attach --from DIR --html FILE writes the same page")

chromium = shutil.which("chromium") or shutil.which("chromium-browser")
expect(chromium is not None, "chromium found (scripts/setup.sh --test installs it)")
if chromium:
    def dom_of(path):
        d = subprocess.run(["timeout", "120", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            f"--user-data-dir={work}/profile", "--enable-logging=stderr", "--v=0",
                            "--virtual-time-budget=10000", "--dump-dom", "file://" + path],
                           capture_output=True, text=True)
        return d.stdout, d.stderr
    # The check can fail: a page whose script throws is caught.
    broken = os.path.join(work, "broken.html")
    open(broken, "w", encoding="utf-8").write(html.replace("guarded('evidence', renderEvidence);",
                                                           "guarded('evidence', renderEvidence); null.boom;"))
    dom, log = dom_of(broken)
    expect('id="report-ready"' not in dom, "a page whose script throws does not reach its end")
    dom, log = dom_of(page)
    expect('id="report-ready"' in dom and 'data-report-error="1"' not in dom and "CONSOLE" not in log,
           "the script runs to its end, no error, no console output")
    expect(dom.count('<tr data-rank="') == 3, "the rank table: one row per process read")
    expect('class="group odd"' in dom and "odd one out: ranks 2" in dom, "rank 2 named as the odd one out")
    expect('id="waitgraph-svg"' in dom, "the wait-for graph is drawn")
    expect("Ranks with no snapshot: 3" in dom, "rank 3 shown without snapshot")
    expect(RLO not in dom, "no raw U+202E in the drawn page")
shutil.rmtree(work, ignore_errors=True)
finish()
