import glob, os, sqlite3, sys
trace, steps, nranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = glob.glob(os.path.join(trace, "*.sqlite"))
assert len(files) == nranks, "trace files: %r" % files
for f in files:
    db = sqlite3.connect(f)
    meta = dict(db.execute("SELECT key, value FROM meta"))
    print(f, "nccl_reached=%s" % meta.get("nccl_reached"), "nccl_libraries=%s" % meta.get("nccl_libraries"))
    assert "dlsym" in meta.get("nccl_reached", "").split(","), meta.get("nccl_reached")
    ops = db.execute("SELECT o.seq, o.op, c.call_index IS NOT NULL FROM ops o LEFT JOIN completions c "
                     "ON c.call_index = o.call_index ORDER BY o.seq").fetchall()
    assert ops == [(s, "all_reduce", 1) for s in range(1, steps + 1)], ops
    for seq, fns in db.execute(
            "SELECT o.seq, group_concat(f.function, ' <- ') FROM ops o JOIN frames f ON f.stack_id = o.stack_id "
            "WHERE f.kind = 'python' GROUP BY o.seq ORDER BY o.seq"):
        assert fns.startswith("PyNcclCommunicator.all_reduce <- run_step"), (seq, fns)
    n = db.execute("SELECT count(DISTINCT o.seq) FROM ops o JOIN frames f ON f.stack_id = o.stack_id "
                   "WHERE f.kind = 'python'").fetchone()[0]
    assert n == steps, "ops with python frames: %d of %d" % (n, steps)
print("ok")
