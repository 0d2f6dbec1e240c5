"""What a summary-first read (`--summary-first`, node summaries) may differ in from `--full-read`,
for summary_first_test.sh and node_summary_test.sh: one rule, both tests.

The summary-first read proves each communicator's collectives before its cut by checkpoint
digest, and their order across communicators by the order digests when every member's agrees
(`reading.order_proven`), and their all-to-alls' counts and splits when each member's file holds
one all-to-all without splits (`reading.all_to_all_proven`). When both are proven its report must
be the full read's. When either is not, its report carries one more evidence item for each,
`order_not_read` and `all_to_all_not_read` (in that order), and its verdict is never
stronger than the full read's: "clean" there is "incomplete" here (exit 0 there is 4 here);
every other verdict, finding and evidence item must be the full read's. How it was read
(`reading`) and the per-communicator windows (`comms[].history`, `retired_history`) differ by
design and are left out.
"""
import json
import re

ORDER_NOT_READ = "order_not_read"
NOT_READ_KINDS = (ORDER_NOT_READ, "all_to_all_not_read")


def cut_of(report):
    return report.get("reading", {}).get("ops_not_read", 0)


def _drop_order_not_read(j):
    """The analyze --json report (or a report page's data) without the order_not_read item."""
    def walk(v):
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v
                    if not (isinstance(x, dict) and x.get("kind") in NOT_READ_KINDS)
                    and not (isinstance(x, str) and x.startswith(("incomplete: summary first: the order across",
                                                                  "incomplete: summary first: the all-to-alls")))]
        return v
    return walk(j)


NOT_READ_COUNT = re.compile(r" \(\d+ of them not read: summary first\)")


def _drop_not_read_count(j):
    """The verdict's summary line without "(N of them not read: summary first)"."""
    if isinstance(j.get("summary"), str):
        j["summary"] = NOT_READ_COUNT.sub("", j["summary"])
    if isinstance(j.get("verdict"), dict) and isinstance(j["verdict"].get("summary"), str):
        j["verdict"] = dict(j["verdict"], summary=NOT_READ_COUNT.sub("", j["verdict"]["summary"]))
    return j


def comparable(j):
    j = _drop_not_read_count(_drop_order_not_read(j))
    for k in ("reading", "retired_history"):
        j.pop(k, None)
    if isinstance(j.get("comms"), list):
        j["comms"] = [{k: v for k, v in c.items() if k != "history"} if isinstance(c, dict) else c for c in j["comms"]]
    return j


def _order_items(j):
    found = []
    def walk(v):
        if isinstance(v, dict):
            if v.get("kind") in NOT_READ_KINDS:
                found.append(v)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(j.get("evidence", []))
    return found


VERDICT_KEYS = ("verdict", "clean", "incomplete", "summary")


def check(s, f, name, rc_s=None, rc_f=None):
    """Raises SystemExit with what differs; returns the number of ops the summary-first read cut."""
    cut = cut_of(s)
    items = _order_items(s)
    if cut_of(f) != 0:
        raise SystemExit(f"{name}: the full read cut something")
    reading = s.get("reading", {})
    proven = reading.get("order_proven") is True and reading.get("all_to_all_proven") is True
    if cut > 0 and not isinstance(reading.get("order_proven"), bool):
        raise SystemExit(f"{name}: a cut read that does not say whether it proved the order")
    want_kinds = [] if cut == 0 else [k for k, key in ((ORDER_NOT_READ, "order_proven"), ("all_to_all_not_read", "all_to_all_proven"))
                                      if reading.get(key) is not True]
    if [i.get("kind") for i in items] != want_kinds:
        raise SystemExit(f"{name}: {cut} ops not read (order proven: {reading.get('order_proven')}, all-to-alls: "
                         f"{reading.get('all_to_all_proven')}) but evidence items {[i.get('kind') for i in items]}")
    weak = cut > 0 and bool(want_kinds)  # else the verdict must be the full read's, exit code too
    a, b = comparable(s), comparable(f)
    if weak and isinstance(s.get("verdict"), dict):  # a report page's data: {"state", "summary", ...}
        sv, fv = dict(a["verdict"]), dict(b["verdict"])
        want = "incomplete" if fv.get("state") == "clean" else fv.get("state")
        if sv.get("state") != want or sv.get("evidence_incomplete") is not True:
            raise SystemExit(f"{name}: verdict {sv} (summary first) against {fv} (full read)")
        for v in (sv, fv):
            for k in ("state", "summary", "evidence_incomplete"):
                v.pop(k, None)
        a["verdict"], b["verdict"] = sv, fv
        # The page counts its evidence: a group and an issue more per item (the items are dropped).
        issues = a.get("evidence", {}).get("issues")
        if isinstance(issues, dict):
            issues["count"] -= len(want_kinds)
            issues["issues"] -= len(want_kinds)
    elif weak and "verdict" in s:
        want = "incomplete" if f["verdict"] == "clean" else f["verdict"]
        if s["verdict"] != want or s.get("incomplete") is not True or s.get("clean") is True:
            raise SystemExit(f"{name}: verdict {s['verdict']!r} (summary first) against {f['verdict']!r} (full read)")
        for k in VERDICT_KEYS:
            a.pop(k, None), b.pop(k, None)
    if rc_s is not None and rc_f is not None:
        want_rc = 4 if weak and rc_f == 0 else rc_f
        if rc_s != want_rc:
            raise SystemExit(f"{name}: exit {rc_s} (summary first) against {rc_f} (full read), expected {want_rc}")
    if a != b:
        lines = [f"{name}: the summary-first report differs from the full read's:"]
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                lines.append(f" {k!r}: summary first {json.dumps(a.get(k))[:400]}\n  full read {json.dumps(b.get(k))[:400]}")
        raise SystemExit("\n".join(lines))
    return cut
