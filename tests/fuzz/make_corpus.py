#!/usr/bin/env python3
"""Makes fuzz seeds from trace directories: each directory's *.lockstep.sqlite files are
compacted (VACUUM with small pages; frames beyond --max-frames per stack dropped) and
concatenated into one input (the fuzz target splits an input at each SQLite header).
A directory of PyTorch Flight Recorder dumps (nccl_trace_rank_<r>, pickle or JSON) becomes one
input of its dumps in rank order, each after the fuzz file marker (sql_mutator.h).

  tests/fuzz/make_corpus.py -o tests/fuzz/corpus tests/data/h200x2-fsdp-ulysses-broken ...
"""
import argparse
import hashlib
import os
import re
import shutil
import sqlite3
import sys
import tempfile


def compact(path, tmp, max_frames):
    out = os.path.join(tmp, os.path.basename(path))
    shutil.copyfile(path, out)
    db = sqlite3.connect(out)
    db.execute("PRAGMA journal_mode=DELETE")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "frames" in tables and max_frames >= 0:
        db.execute("DELETE FROM frames WHERE depth >= ?", (max_frames,))
    db.commit()
    db.execute("PRAGMA page_size=512")
    db.execute("VACUUM")
    db.close()
    with open(out, "rb") as f:
        return f.read()


FILE_MARKER = b"\0LSFUZZ-FILE\0"


def fr_dumps(d):
    """The FR dumps of `d`, each after the file marker, at the position of its rank (the fuzz
    target names part i nccl_trace_rank_<i>); a missing rank is an empty part."""
    by_rank = {}
    for f in os.listdir(d):
        m = re.match(r"nccl_trace_rank_(\d+)(\.json|\.pkl|\.pickle)?$", f)
        if m:
            with open(os.path.join(d, f), "rb") as fh:
                by_rank[int(m.group(1))] = fh.read()
    if not by_rank:
        return []
    return [FILE_MARKER + by_rank.get(r, b"") for r in range(max(by_rank) + 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--max-frames", type=int, default=12)
    ap.add_argument("--single", action="store_true", help="also one seed per file")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for d in a.dirs:
            files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".lockstep.sqlite"))
            if files:
                blobs = [compact(f, tmp, a.max_frames) for f in files]
            else:
                blobs = fr_dumps(d)
            if not blobs:
                continue
            seeds = [b"".join(blobs)] + (blobs if a.single and len(blobs) > 1 else [])
            for s in seeds:
                name = os.path.basename(os.path.normpath(d)) + "-" + hashlib.sha1(s).hexdigest()[:10]
                with open(os.path.join(a.out, name), "wb") as f:
                    f.write(s)
                print(f"{name}: {len(s)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
