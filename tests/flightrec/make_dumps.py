"""Writes synthetic multi-rank Flight Recorder dumps (torch 2.10 schema) with Python's pickle.

  make_dumps.py OUT --ranks 3 [--diverge-rank 1 --diverge-seq 3] [--drop-rank 2] [--hostile-rank 2]
                    [--lose-oldest-rank 1] [--json]

Each rank issues on the default group: all_reduce, all_gather, reduce_scatter, all_reduce, ...
(collective_seq_id 1..6) and a send/recv pair with its neighbour. --diverge-rank issues
all_to_all where the others issue reduce_scatter at --diverge-seq. --drop-rank writes no dump for
that rank. --hostile-rank writes a pickle that calls os.system instead of that rank's dump.
--lose-oldest-rank: that rank's first all_reduce has 999 elements where the others have 1024, and
its ring lost that entry (record_id 0) before the dump: the dump alone looks clean.
"""
import argparse
import json
import os
import pickle


def frames(fn, line):
    return [{"name": "reduce_scatter_tensor", "filename": "/torch/distributed/distributed_c10d.py", "line": 4652},
            {"name": fn, "filename": "/job/train.py", "line": line},
            {"name": "<module>", "filename": "/job/train.py", "line": 99}]


def entry(rid, seq, name, ins, outs, state, fr, p2p_seq=0, is_p2p=False):
    return {"record_id": rid, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": p2p_seq, "op_id": rid + 1, "profiling_name": name, "time_created_ns": 1000 + rid,
            "input_sizes": ins, "input_dtypes": ["Float"] * len(ins), "output_sizes": outs,
            "output_dtypes": ["Float"] * len(outs), "state": state, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": 2000 + rid if state == "completed" else None, "retired": state == "completed",
            "timeout_ms": 600000, "is_p2p": is_p2p, "thread_name": "pt_main_thread", "thread_id": "140000",
            "frames": fr}


def rank_dump(rank, world, a):
    ops = [("nccl:all_reduce", [[1024]], [[1024]]), ("nccl:_all_gather_base", [[256]], [[256 * world]]),
           ("nccl:_reduce_scatter_base", [[256 * world]], [[256]]), ("nccl:all_reduce", [[8]], [[8]]),
           ("nccl:all_reduce", [[16]], [[16]]), ("nccl:broadcast", [[32]], [[32]])]
    entries, rid = [], 0
    for i, (name, ins, outs) in enumerate(ops):
        seq = i + 1
        if rank == a.diverge_rank and seq == a.diverge_seq:
            name, ins, outs = "nccl:all_to_all", [[256 * world]], [[256 * world]]
        stuck = a.diverge_seq and seq >= a.diverge_seq
        entries.append(entry(rid, seq, name, ins, outs, "scheduled" if stuck else "completed",
                             frames("step" if not stuck else "fsdp_reduce", 40 + seq)))
        rid += 1
        if seq == 2 and world > 1 and not a.diverge_seq:
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            entries.append(entry(rid, seq, f"nccl:send {rank}->{nxt}", [[16]], [[16]], "completed", [], 1, True))
            entries.append(entry(rid + 1, seq, f"nccl:recv {rank}<-{prv}", [[16]], [[16]], "completed", [], 2, True))
            rid += 2
    if rank == a.lose_oldest_rank:
        entries[0]["input_sizes"] = entries[0]["output_sizes"] = [[999]]
        entries = entries[1:]  # overwritten in the ring
    return {"version": "2.10", "comm_lib_version": "2.28.9",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
            "pg_status": {"0": {"last_enqueued_collective": 6, "last_started_collective": -1,
                                "last_completed_collective": 6}},
            "entries": entries}


class Evil:
    def __reduce__(self):
        return (os.system, ("echo PWNED > /tmp/lockstep-fr-pwned",))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--diverge-rank", type=int, default=-1)
    ap.add_argument("--diverge-seq", type=int, default=0)
    ap.add_argument("--drop-rank", type=int, default=-1)
    ap.add_argument("--hostile-rank", type=int, default=-1)
    ap.add_argument("--lose-oldest-rank", type=int, default=-1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for r in range(a.ranks):
        if r == a.drop_rank:
            continue
        path = os.path.join(a.out, f"nccl_trace_rank_{r}")
        if r == a.hostile_rank:
            with open(path, "wb") as f:
                pickle.dump({"version": "2.10", "entries": [Evil()]}, f, protocol=2)
        elif a.json:
            d = rank_dump(r, a.ranks, a)
            for e in d["entries"]:
                e.pop("frames")
                for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                    e[k] = e[k] or 0
            with open(path + ".json", "w") as f:
                json.dump(d, f)
        else:
            with open(path, "wb") as f:
                pickle.dump(rank_dump(r, a.ranks, a), f, protocol=2)


if __name__ == "__main__":
    main()
