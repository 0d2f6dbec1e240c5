"""Checks a lockstep trace made on the GPU machine against what the program said it issued.

  check_trace.py collectives TRACE_DIR EXPECT_JSON   # examples/torch/collectives.py --expect
  check_trace.py graph TRACE_DIR RESULT_JSON          # last line of examples/torch/cuda_graph.py

Reads the SQLite files directly (schema/trace_schema.h), so it checks the recorder independently
of the analyzer. Prints one line per check, 'ok' or 'FAIL ...', and exits 1 if any failed.
"""
import glob
import json
import sqlite3
import sys

failures = 0


def check(cond, what, detail=""):
    global failures
    print(("ok    " if cond else "FAIL  ") + what + (f": {detail}" if detail and not cond else ""))
    if not cond:
        failures += 1


def open_trace(d):
    files = sorted(glob.glob(f"{d}/*.lockstep.sqlite"))
    check(len(files) >= 1, f"trace files in {d}", f"found {files}")
    # the biggest file is the training process (not a compile worker)
    best = max(files, key=lambda f: sqlite3.connect(f"file:{f}?mode=ro", uri=True)
               .execute("select count(*) from ops").fetchone()[0])
    return sqlite3.connect(f"file:{best}?mode=ro", uri=True)


def python_frames(db, stack_id):
    return db.execute("select function, file, line from frames where stack_id=? and kind='python' "
                      "order by depth", (stack_id,)).fetchall()


def collectives(d, expect_file):
    db = open_trace(d)
    expect = json.load(open(expect_file))
    ops = db.execute("select call_index, op, dtype, count, stack_id, state, seq from ops "
                     "where seq is not null order by call_index").fetchall()
    print(f"trace: {len(ops)} sequenced ops; expected {len(expect)} from the script")
    i = 0
    for e in expect:
        # the expected op is the next op (in call order) issued from e['function']
        found = None
        for j in range(i, len(ops)):
            call, op, dtype, count, stack, state, seq = ops[j]
            frames = python_frames(db, stack) if stack is not None else []
            if any(f[0] == e["function"] for f in frames):
                found = (op, dtype, count, frames, call)
                i = j + 1
                break
        if found is None and e.get("skip_reason"):
            print(f"skip  {e['function']}: {e['skip_reason']}")
            continue
        check(found is not None, f"{e['function']}: an op issued from it is recorded")
        if not found:
            continue
        op, dtype, count, frames, call = found
        check(op == e["op"], f"{e['function']}: op", f"recorded {op}, expected {e['op']}")
        check(dtype == e["dtype"], f"{e['function']}: dtype", f"recorded {dtype}, expected {e['dtype']}")
        check(count == e["count"], f"{e['function']}: count", f"recorded {count}, expected {e['count']}")
        line = next(f[2] for f in frames if f[0] == e["function"])
        check(line == e["line"], f"{e['function']}: python line", f"recorded {line}, expected {e['line']}")
    done = db.execute("select count(*) from ops o join completions c using(call_index) "
                      "where o.seq is not null").fetchone()[0]
    check(done == len(ops), "every sequenced op has a completion from a CUDA event",
          f"{done} of {len(ops)} completed")
    comms = db.execute("select count(*) from comms").fetchone()[0]
    check(comms >= 2, "new_group created a second communicator", f"{comms} comms")
    nccl = dict(db.execute("select key, value from meta"))
    print("meta: nccl_version=%s nccl_library=%s stack_mode=%s" % (
        nccl.get("nccl_version"), nccl.get("nccl_library"), nccl.get("stack_mode")))


def graph(d, result_file):
    db = open_trace(d)
    res = json.loads(open(result_file).read().strip().splitlines()[-1])
    captured = db.execute("select count(*) from ops where state='captured'").fetchone()[0]
    launched = db.execute("select count(*) from ops where state='graph_launched'").fetchone()[0]
    launches = db.execute("select count(*) from graph_launches").fetchone()[0]
    check(captured == res["captured_ops"], "captured ops recorded", f"{captured}")
    check(launches == res["replays"], "graph launches recorded", f"{launches} vs {res['replays']}")
    check(launched == res["captured_ops"] * res["replays"], "one executed op per captured op per replay",
          f"{launched}")
    seqs = [r[0] for r in db.execute(
        "select seq from ops o join comms c on o.comm_id=c.id where seq is not null "
        "and c.parent_id is null order by call_index")]
    check(seqs == list(range(1, len(seqs) + 1)), "seq numbers are 1..N in call order", f"{seqs}")
    total = len(seqs)
    check(total >= res["executed_seq_expected"], "sequence counts replays",
          f"{total} sequenced ops on the default comm, expected at least {res['executed_seq_expected']}")


if __name__ == "__main__":
    {"collectives": collectives, "graph": graph}[sys.argv[1]](*sys.argv[2:])
    sys.exit(1 if failures else 0)
