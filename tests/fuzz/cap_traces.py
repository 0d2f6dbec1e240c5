#!/usr/bin/env python3
"""Capped (bounded) variants of schema-2 trace files, for fuzz seeds: the first N
collectives of each file's first communicator are retired (rows deleted, comms.retired_*,
checkpoints every 4 collectives, meta checkpoint_interval / retired_ops). Digests are made up:
the seeds exercise the bounded-trace code (checkpoints, ordinal alignment), not a clean verdict.

  cap_traces.py DIR N      (in place; the committed seeds, from build/bin/gen_trace DIR --ranks 2 --ops 24:
                            gen-trace-schema2-capped: N=9 on both files; -unequal: rank 1 N=5, rank 0 N=9)
"""
import sqlite3, sys, glob, random
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
digests = {}
for f in sorted(glob.glob(d + '/*.lockstep.sqlite')):
    db = sqlite3.connect(f)
    comm = db.execute("SELECT comm_id FROM signatures ORDER BY id LIMIT 1").fetchone()[0]
    rows = db.execute("SELECT o.call_index, o.seq FROM op_rows o JOIN signatures s ON s.id=o.sig "
                      "WHERE s.comm_id=? AND o.seq IS NOT NULL ORDER BY o.call_index", (comm,)).fetchall()
    k = 0
    for ci, seq in rows:
        k += 1
        dg = digests.setdefault(k, rng.getrandbits(63))
        if k % 4 == 0:
            db.execute("INSERT OR REPLACE INTO checkpoints(comm_id,ordinal,seq,digest) VALUES(?,?,?,?)", (comm, k, seq, dg))
        if k <= n:
            db.execute("DELETE FROM op_rows WHERE call_index<=?", (ci,))
            db.execute("UPDATE comms SET retired_collectives=?, retired_through_seq=?, retired_digest=? WHERE id=?",
                       (k, seq, dg, comm))
    db.execute("INSERT OR REPLACE INTO meta VALUES('checkpoint_interval','4')")
    db.execute("INSERT OR REPLACE INTO meta VALUES('retired_ops',?)", (str(n),))
    db.commit()
    db.execute("VACUUM")
    db.close()
