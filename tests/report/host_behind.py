#!/usr/bin/env python3
"""Makes one host of a bench/gen_trace directory fall behind, for the report's browser test.

    host_behind.py DIR FIRST_RANK COMPLETED_BEFORE_CALL

Ranks FIRST_RANK..FIRST_RANK+7 (one host of 8, as gen_trace places them) get a copy of the next
host's files, renumbered (meta, communicator ranks, the tensor-parallel group's hash), with no
completion from call index COMPLETED_BEFORE_CALL on: they issued what everyone issued, but their
GPU work stopped earlier. Files of those ranks that were removed are recreated.
"""
import shutil
import sqlite3
import sys

MASK = (1 << 64) - 1


def mix(x):  # bench/gen_trace.cpp's hash, so the renumbered ranks join the right group
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def main():
    d, first, behind_from = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for r in range(first, first + 8):
        dst = f"{d}/rank-{r}.lockstep.sqlite"
        shutil.copyfile(f"{d}/rank-{r + 8}.lockstep.sqlite", dst)
        db = sqlite3.connect(dst)
        db.execute("UPDATE meta SET value=? WHERE key='global_rank'", (str(r),))
        db.execute("UPDATE meta SET value=? WHERE key='host'", (f"node{r // 8}",))
        db.execute("UPDATE meta SET value=? WHERE key='pid'", (str(10000 + r),))
        db.execute("UPDATE comms SET rank=? WHERE id=1", (r,))
        db.execute("UPDATE comms SET comm_hash=?, split_color=? WHERE id=2", ("%016x" % mix(0x5EED + 1 + r // 8), r // 8))
        db.execute("UPDATE comms SET rank=? WHERE id=3", (r // 8,))
        db.execute("DELETE FROM completions WHERE call_index >= ?", (behind_from,))
        db.commit()
        db.close()


if __name__ == "__main__":
    main()
