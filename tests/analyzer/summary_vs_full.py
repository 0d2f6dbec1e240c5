"""What a summary-first read (`--summary-first`, node summaries) may differ in from `--full-read`,
for summary_first_test.sh and node_summary_test.sh: one rule, both tests.

The summary-first read proves each communicator's collectives before its cut by checkpoint
digest but does not read the order in which each rank issued them across communicators, so when
it cut anything its report carries exactly one more evidence item, `order_not_read`, and its
verdict is never stronger than the full read's: "clean" there is "incomplete" here (exit 0 there
is 4 here); every other verdict, finding and evidence item must be the full read's. How it was
read (`reading`) and the per-communicator windows (`comms[].history`, `retired_history`) differ
by design and are left out.
"""
import json

ORDER_NOT_READ = "order_not_read"


def cut_of(report):
    return report.get("reading", {}).get("ops_not_read", 0)


def _drop_order_not_read(j):
    """The analyze --json report (or a report page's data) without the order_not_read item."""
    def walk(v):
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v
                    if not (isinstance(x, dict) and x.get("kind") == ORDER_NOT_READ)
                    and not (isinstance(x, str) and x.startswith("incomplete: summary first: the order across"))]
        return v
    return walk(j)


def comparable(j):
    j = _drop_order_not_read(j)
    for k in ("reading", "retired_history"):
        j.pop(k, None)
    if isinstance(j.get("comms"), list):
        j["comms"] = [{k: v for k, v in c.items() if k != "history"} if isinstance(c, dict) else c for c in j["comms"]]
    return j


def _order_items(j):
    found = []
    def walk(v):
        if isinstance(v, dict):
            if v.get("kind") == ORDER_NOT_READ:
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
    if (cut > 0) != (len(items) == 1) or len(items) > 1:
        raise SystemExit(f"{name}: {cut} ops not read but {len(items)} order_not_read evidence items")
    a, b = comparable(s), comparable(f)
    if cut > 0 and isinstance(s.get("verdict"), dict):  # a report page's data: {"state", "summary", ...}
        sv, fv = dict(a["verdict"]), dict(b["verdict"])
        want = "incomplete" if fv.get("state") == "clean" else fv.get("state")
        if sv.get("state") != want or sv.get("evidence_incomplete") is not True:
            raise SystemExit(f"{name}: verdict {sv} (summary first) against {fv} (full read)")
        for v in (sv, fv):
            for k in ("state", "summary", "evidence_incomplete"):
                v.pop(k, None)
        a["verdict"], b["verdict"] = sv, fv
        # The page counts its evidence: one group and one issue more (the item itself is dropped).
        issues = a.get("evidence", {}).get("issues")
        if isinstance(issues, dict):
            issues["count"] -= 1
            issues["issues"] -= 1
    elif cut > 0 and "verdict" in s:
        want = "incomplete" if f["verdict"] == "clean" else f["verdict"]
        if s["verdict"] != want or s.get("incomplete") is not True or s.get("clean") is True:
            raise SystemExit(f"{name}: verdict {s['verdict']!r} (summary first) against {f['verdict']!r} (full read)")
        for k in VERDICT_KEYS:
            a.pop(k, None), b.pop(k, None)
    if rc_s is not None and rc_f is not None:
        want_rc = 4 if cut > 0 and rc_f == 0 else rc_f
        if rc_s != want_rc:
            raise SystemExit(f"{name}: exit {rc_s} (summary first) against {rc_f} (full read), expected {want_rc}")
    if a != b:
        lines = [f"{name}: the summary-first report differs from the full read's:"]
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                lines.append(f" {k!r}: summary first {json.dumps(a.get(k))[:400]}\n  full read {json.dumps(b.get(k))[:400]}")
        raise SystemExit("\n".join(lines))
    return cut
