"""Writes Flight Recorder dumps (torch 2.10 schema) whose windows, gaps or fields leave part of
the evidence unknown: each must give an incomplete verdict (exit 4), never a divergence or clean.

  make_scenarios.py OUT SCENARIO

Scenarios (a review's reproductions; docs/flight-recorder.md "Windows"):
  p2p_window      pipeline steps (all_reduce, then send 0->1 / recv 1<-0); the rings wrapped at
                  different points, so rank 1 holds one receive more than rank 0 holds sends
  coalesced_cut   a coalesced group (two all_reduce parts, closed by nccl:coalesced) whose first
                  part rank 0's ring overwrote
  lost_collective rank 0's window no longer holds the all_reduce that rank 1's does
  record_gap      rank 1 lost record_id 3 (its all_gather at seq 4) in the middle of its window
  seq_gap         record ids contiguous, but rank 1's collective_seq_id jumps 3 -> 5
  dump_times      rank 1 dumped after seq 4; rank 0's seqs 5 and 6 completed
  no_seq          entries without collective_seq_id; rank 0 all_reduce, rank 1 all_gather
  unknown_dtype   rank 0 ComplexFloat, rank 1 ComplexDouble (no NCCL name for either)
  ok_window       both rings wrapped, at different points, on identical histories
Divergences inside what both windows hold are still claimed (exit 1):
  p2p_window_diverge  p2p_window, and rank 1's receive of step 5 is one element longer
  gap_after_divergence  rank 1 issues all_gather at seq 2 where rank 0 issues all_reduce, then
                  loses record_id 4
"""
import os
import pickle
import sys


def E(rid, seq, name, n=1024, state="completed", p2p=0, is_p2p=False, dtype="Float"):
    return {"record_id": rid, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": p2p, "op_id": rid + 1, "profiling_name": name, "time_created_ns": 1000 + rid,
            "input_sizes": [[n]], "input_dtypes": [dtype], "output_sizes": [[n]], "output_dtypes": [dtype],
            "state": state, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": 2000 + rid if state == "completed" else None,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": is_p2p, "thread_name": "t",
            "thread_id": "1", "frames": [{"name": "step", "filename": "/job/train.py", "line": 40}]}


def dump(entries, world=2):
    return {"version": "2.10", "comm_lib_version": "2.28.9", "pg_status": {}, "entries": entries,
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}}}


def p2p(rid, p, n, r, peer, send=True):
    return E(rid, 0, f"nccl:send {r}->{peer}" if send else f"nccl:recv {r}<-{peer}", n=n, p2p=p, is_p2p=True)


def pipeline(r):
    es, rid = [], 0
    for k in range(1, 7):
        es.append(E(rid, k, "nccl:all_reduce"))
        es.append(p2p(rid + 1, k, 16 * k, r, 1 - r, send=(r == 0)))
        rid += 2
    return es


def coalesced():
    return [E(0, 1, "nccl:all_reduce"), E(1, 2, "nccl:all_reduce"), E(2, 3, "nccl:all_reduce", n=8),
            E(3, 3, "nccl:all_reduce", n=16), E(4, 3, "nccl:coalesced", n=0), E(5, 4, "nccl:all_reduce"),
            E(6, 5, "nccl:all_reduce")]


def six():
    names = ["all_reduce", "all_reduce", "all_reduce", "_all_gather_base", "_reduce_scatter_base", "broadcast"]
    return [E(i, i + 1, "nccl:" + n) for i, n in enumerate(names)]


def scenario(name):
    """-> {rank: entries}"""
    if name == "p2p_window":
        return {0: pipeline(0)[4:], 1: pipeline(1)[2:]}
    if name == "ok_window":
        return {0: pipeline(0)[4:], 1: pipeline(1)[3:]}
    if name == "p2p_window_diverge":
        r1 = pipeline(1)[2:]
        r1[7]["input_sizes"] = r1[7]["output_sizes"] = [[16 * 5 + 1]]
        return {0: pipeline(0)[4:], 1: r1}
    if name == "coalesced_cut":
        return {0: coalesced()[3:], 1: coalesced()[1:]}
    if name == "lost_collective":
        return {0: [E(0, 1, "nccl:all_reduce"), p2p(1, 1, 16, 0, 1), p2p(2, 2, 32, 0, 1), p2p(3, 3, 64, 0, 1)][2:],
                1: [E(0, 1, "nccl:all_reduce"), p2p(1, 1, 16, 1, 0, False), p2p(2, 2, 32, 1, 0, False),
                    p2p(3, 3, 64, 1, 0, False)]}
    if name == "record_gap":
        return {0: six(), 1: [e for e in six() if e["record_id"] != 3]}
    if name == "seq_gap":
        r1 = six()
        for e in r1[3:]:
            e["collective_seq_id"] += 1
        return {0: six(), 1: r1}
    if name == "gap_after_divergence":
        r1 = [e for e in six() if e["record_id"] != 4]
        r1[1]["profiling_name"] = "nccl:_all_gather_base"
        return {0: six(), 1: r1}
    if name == "dump_times":
        return {0: [E(i, i + 1, "nccl:all_reduce") for i in range(6)], 1: [E(i, i + 1, "nccl:all_reduce") for i in range(4)]}
    if name == "no_seq":
        def noseq(e):
            e = dict(e)
            e.pop("collective_seq_id")
            return e
        return {0: [noseq(E(i, i + 1, "nccl:all_reduce")) for i in range(3)],
                1: [noseq(E(i, i + 1, "nccl:_all_gather_base")) for i in range(3)]}
    if name == "unknown_dtype":
        return {0: [E(0, 1, "nccl:all_reduce", dtype="ComplexFloat")], 1: [E(0, 1, "nccl:all_reduce", dtype="ComplexDouble")]}
    raise SystemExit("unknown scenario " + name)


def main():
    out, name = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for rank, entries in scenario(name).items():
        with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "wb") as f:
            pickle.dump(dump(entries), f, protocol=2)


if __name__ == "__main__":
    main()
