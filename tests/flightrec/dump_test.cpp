// The real torch 2.11 dumps from the H200 (tests/data/fr-h200), read and mapped.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "flightrec.h"

namespace lockstep::flightrec {
namespace {

std::string data(const std::string& rel) { return std::string(LOCKSTEP_FR_DATA) + "/" + rel; }
FrDump read(const std::string& rel) {
  std::ifstream in(data(rel), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return read_dump(ss.str(), data(rel));
}

TEST(RealDumps, PickleAndJsonAgree) {
  FrDump p = read("ws1-completed/nccl_trace_rank_0");
  FrDump j = read("ws1-completed-json/nccl_trace_rank_0.json");
  EXPECT_EQ(p.format, "pickle");
  EXPECT_EQ(j.format, "json");
  EXPECT_EQ(p.version, "2.10");
  EXPECT_EQ(p.comm_lib_version, "2.28.9");
  ASSERT_EQ(p.entries.size(), 10u);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].desc, "default_pg");
  EXPECT_EQ(p.groups[1].desc, "tp");
  for (auto& e : p.entries) EXPECT_EQ(e.state, "completed");
  EXPECT_FALSE(p.stacks.empty());
  EXPECT_TRUE(j.stacks.empty());  // the JSON variant has no frames
  EXPECT_EQ(p.entries[7].profiling_name, "nccl:allreduce_coalesced");
  EXPECT_EQ(p.entries[7].input_sizes, (std::vector<std::vector<int64_t>>{{64}, {32}}));
}

TEST(RealDumps, CompletedMapsToLockstepVocabulary) {
  FrDump d = read("ws1-completed/nccl_trace_rank_0");
  Process p = to_process(d, rank_from_file_name(d.path));
  EXPECT_EQ(p.global_rank, 0);
  ASSERT_EQ(p.comms.size(), 2u);
  EXPECT_EQ(p.comms[0].name, "default_pg");
  EXPECT_EQ(p.comms[1].name, "tp");
  EXPECT_EQ(p.comms[0].nranks, 1);
  EXPECT_NE(p.comms[0].hash, p.comms[1].hash);
  std::vector<std::string> ops;
  for (auto& o : p.ops)
    ops.push_back(std::string(vocab::name(o.op)) + ":" + vocab::stored_name(o.dtype) + ":" + std::to_string(o.count) + ":" + std::to_string(o.seq));
  EXPECT_EQ(ops, (std::vector<std::string>{"all_reduce:float32:1:1", "all_reduce:float32:1024:2", "broadcast:float32:1024:3",
                                           "all_gather:float32:1024:4", "reduce_scatter:float32:1024:5", "all_to_all:float32:0:6",
                                           "all_to_all:float32:0:7", "coalesced:float32:96:8", "all_reduce:float16:256:1",
                                           "all_reduce:float32:1:9"}));
  ASSERT_EQ(p.ops[7].parts.size(), 2u);
  EXPECT_EQ(p.ops[7].parts[1].count, 32);
  for (auto& o : p.ops) EXPECT_TRUE(o.completed);
  EXPECT_EQ(p.meta.at("fr_history_dropped"), "0");
  EXPECT_EQ(p.meta.at("fr_window_first_seq.default_pg"), "1");
}

TEST(RealDumps, WatchdogDumpKeepsTheStuckOpsAndTheirFrames) {
  FrDump d = read("ws1-watchdog/nccl_trace_rank_0");
  Process p = to_process(d, 0);
  ASSERT_EQ(p.ops.size(), 5u);
  EXPECT_TRUE(p.ops[0].completed);
  for (size_t k = 1; k < 5; ++k) EXPECT_FALSE(p.ops[k].completed) << k;
  const Op& rs = p.ops[4];
  EXPECT_EQ(rs.op, lockstep::vocab::Op::ReduceScatter);
  EXPECT_EQ(rs.seq, 5);
  ASSERT_TRUE(p.stacks.count(rs.stack_id));
  const auto& frames = p.stacks.at(rs.stack_id);
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames[2].kind, lockstep::vocab::FrameKind::Python);
  EXPECT_EQ(frames[2].function, "schedule");
  EXPECT_EQ(frames[2].line, 31);
  EXPECT_NE(frames[2].file.find("fr_dump.py"), std::string::npos);
}

TEST(Names, RankFromFileName) {
  EXPECT_EQ(rank_from_file_name("/x/nccl_trace_rank_12"), 12);
  EXPECT_EQ(rank_from_file_name("/x/nccl_trace_rank_3.json"), 3);
  EXPECT_EQ(rank_from_file_name("/x/dump"), -1);
}

TEST(Windows, MembersAlignedOnTheNewestFirstSeq) {
  auto proc = [](int rank, int first, int last) {
    Process p;
    p.global_rank = rank;
    Comm c;
    c.hash = "h";
    c.name = "default_pg";
    c.nranks = 2;
    p.comms.push_back(c);
    for (int s = first; s <= last; ++s) {
      Op o;
      o.comm = 0;
      o.seq = s;
      o.call_index = s;
      o.op = lockstep::vocab::Op::AllReduce;
      p.ops.push_back(o);
    }
    return p;
  };
  std::vector<Process> ps{proc(0, 3, 10), proc(1, 5, 9)};
  align_windows(ps);
  EXPECT_EQ(ps[0].ops.front().seq, 5);
  EXPECT_EQ(ps[1].ops.front().seq, 5);
  EXPECT_EQ(ps[0].meta.at("fr_aligned_dropped.default_pg"), "2");
}

// Holes: what a dump does not hold whole is named as a drops range (trace_model.h DropRange, the
// recorder's mechanism), from the first seq that is unknown.
FrEntry entry(int64_t rid, int64_t seq, const std::string& name, bool completed = true) {
  FrEntry e;
  e.record_id = rid;
  e.pg_name = "0";
  e.pg_desc = "default_pg";
  e.collective_seq_id = seq;
  e.profiling_name = name;
  e.input_sizes = e.output_sizes = {{1024}};
  e.input_dtypes = e.output_dtypes = {"Float"};
  e.state = completed ? "completed" : "scheduled";
  e.time_created_ns = 1000 + rid;
  return e;
}
FrDump two_rank_dump(std::vector<FrEntry> entries, int rank) {
  FrDump d;
  d.path = "nccl_trace_rank_" + std::to_string(rank);
  d.version = "2.10";
  d.groups = {{"0", "default_pg", {0, 1}}};
  d.entries = std::move(entries);
  return d;
}
std::map<int64_t, std::string> holes(const Process& p) {
  std::map<int64_t, std::string> out;
  for (const DropRange& d : p.drops) out[d.first_seq] = d.reason;
  return out;
}

TEST(Holes, SeqGapAndRecordGap) {
  // seqs 1 2 3 5: a hole at 4.
  Process a = to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce"), entry(1, 2, "nccl:all_reduce"), entry(2, 3, "nccl:all_reduce"),
                                        entry(3, 5, "nccl:all_reduce")}, 1), 1);
  EXPECT_EQ(holes(a), (std::map<int64_t, std::string>{{4, "fr_seq_gap"}}));
  EXPECT_TRUE(a.drops_known);
  // record 2 lost: seq 3 missing, and no p2p op after the gap proves the p2p queue whole.
  Process b = to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce"), entry(1, 2, "nccl:all_reduce"), entry(3, 4, "nccl:all_reduce")}, 1), 1);
  EXPECT_EQ(holes(b), (std::map<int64_t, std::string>{{3, "fr_seq_gap"}, {kP2PSeqBase + 1, "fr_record_gap"}}));
  // record 2 lost, seqs contiguous (it was on no group of this rank's collectives): the last
  // collective before the gap may have been followed by one in it.
  Process e = to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce"), entry(1, 2, "nccl:all_reduce"), entry(3, 3, "nccl:all_reduce")}, 1), 1);
  EXPECT_EQ(holes(e), (std::map<int64_t, std::string>{{kP2PSeqBase + 1, "fr_record_gap"}}));
  // Whole and contiguous: no hole.
  Process c = to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce"), entry(1, 2, "nccl:all_reduce")}, 0), 0);
  EXPECT_TRUE(holes(c).empty());
  EXPECT_FALSE(c.drops_known);
}

TEST(Holes, UnsequencedAndUnknownDtype) {
  FrEntry noseq = entry(1, 0, "nccl:all_reduce");
  FrEntry complex = entry(2, 3, "nccl:all_reduce");
  complex.input_dtypes = complex.output_dtypes = {"ComplexFloat"};
  Process p = to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce"), noseq, complex}, 0), 0);
  auto h = holes(p);
  EXPECT_EQ(h[2], "fr_no_seq");
  EXPECT_EQ(h[3], "fr_unknown_dtype");
}

TEST(Holes, DumpEndedBeforeAPeerCompleted) {
  std::vector<Process> ps{to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce"), entry(1, 2, "nccl:all_reduce"),
                                                    entry(2, 3, "nccl:all_reduce")}, 0), 0),
                          to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce")}, 1), 1)};
  align_windows(ps);
  EXPECT_TRUE(holes(ps[0]).empty());
  EXPECT_EQ(holes(ps[1]), (std::map<int64_t, std::string>{{2, "fr_dump_ended"}}));
  // In flight on the peer: the dump end stays the end (the peer waits for what it never issued).
  std::vector<Process> qs{to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce"), entry(1, 2, "nccl:all_reduce", false)}, 0), 0),
                          to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce")}, 1), 1)};
  align_windows(qs);
  EXPECT_TRUE(holes(qs[1]).empty());
}

TEST(Holes, CoalescedGroupCutAtTheWindowStartIsLeftOut) {
  // The ring kept the group's second part and its end: the window starts after the group.
  FrEntry part = entry(3, 3, "nccl:all_reduce");
  part.input_sizes = part.output_sizes = {{16}};
  Process p = to_process(two_rank_dump({part, entry(4, 3, "nccl:coalesced"), entry(5, 4, "nccl:all_reduce")}, 0), 0);
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].seq, 4);
}

// torch 2.11's batch_isend_irecv (tests/data/fr-h200/ws1-p2p, a send and a receive to the rank
// itself): the parts are p2p entries with p2p_seq_id 1 that stay "scheduled"; the "coalesced"
// entry closing them is not marked p2p and repeats the last collective's collective_seq_id (7).
// One send_recv op at p2p seq 1, completed, whole: no hole, no second seq 7, no timeout.
TEST(RealDumps, BatchedSendRecvIsOneWholeOp) {
  for (const char* rel : {"ws1-p2p/nccl_trace_rank_0", "ws1-p2p-json/nccl_trace_rank_0.json"}) {
    FrDump d = read(rel);
    ASSERT_EQ(d.entries.size(), 13u) << rel;
    EXPECT_FALSE(d.entries[9].is_p2p) << rel;
    EXPECT_EQ(d.entries[9].collective_seq_id, 7) << rel;
    Process p = to_process(d, rank_from_file_name(d.path));
    std::vector<std::string> ops;
    for (auto& o : p.ops) ops.push_back(std::string(vocab::name(o.op)) + ":" + std::to_string(o.seq));
    EXPECT_EQ(ops, (std::vector<std::string>{"all_reduce:1", "all_reduce:2", "broadcast:3", "all_gather:4", "reduce_scatter:5",
                                             "all_to_all:6", "all_to_all:7", "send_recv:" + std::to_string(kP2PSeqBase + 1),
                                             "coalesced:8", "all_reduce:1", "all_reduce:9"}))
        << rel;
    ASSERT_EQ(p.ops[7].parts.size(), 2u) << rel;
    EXPECT_TRUE(p.ops[7].completed) << rel;
    EXPECT_TRUE(holes(p).empty()) << rel;
    EXPECT_TRUE(p.hangs.empty()) << rel;
  }
}

TEST(Holes, ABatchsScheduledPartsAreNoTimeout) {
  // A batch's parts stay "scheduled" while its end completed; a dump taken more than the
  // timeout later (a long job's window) must not read them as timed out.
  FrEntry send = entry(1, 1, "nccl:send 0->1", false), recv = entry(2, 1, "nccl:recv 0<-1", false);
  for (FrEntry* e : {&send, &recv}) {
    e->is_p2p = true;
    e->p2p_seq_id = 1;
    e->timeout_ms = 1;
  }
  FrEntry end = entry(3, 1, "nccl:coalesced");
  end.p2p_seq_id = 1;
  end.timeout_ms = 1;
  FrEntry later = entry(4, 2, "nccl:all_reduce");
  later.time_created_ns = 1000 + 60 * 1000000000LL;
  Process p = to_process(two_rank_dump({entry(0, 1, "nccl:all_reduce"), send, recv, end, later}, 0), 0);
  EXPECT_TRUE(p.hangs.empty());
  ASSERT_EQ(p.ops.size(), 3u);
  EXPECT_EQ(p.ops[1].seq, kP2PSeqBase + 1);
  EXPECT_TRUE(p.ops[1].completed);
  EXPECT_TRUE(holes(p).empty());
}

// Hostile numbers (a crafted dump): each is named where it is read, or saturates, never
// overflows (the FR fuzz target runs with UBSan; these pin the rules down).
// A one-entry JSON dump; `fields` ("key": value, ...) replace or add entry fields.
std::string one_entry_dump(const std::string& fields) {
  std::map<std::string, std::string> e = {{"record_id", "0"},
                                          {"process_group", R"(["0", "default_pg"])"},
                                          {"collective_seq_id", "1"},
                                          {"profiling_name", R"("nccl:all_reduce")"},
                                          {"state", R"("completed")"},
                                          {"time_created_ns", "1000"}};
  if (!fields.empty()) {
    size_t colon = fields.find(':');
    e[fields.substr(1, fields.find('"', 1) - 1)] = fields.substr(colon + 1);
  }
  std::string entry;
  for (auto& [k, v] : e) entry += (entry.empty() ? "" : ", ") + ("\"" + k + "\": " + v);
  return R"({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0]"}}, "entries": [{)" +
         entry + "}]}";
}

std::string read_error(const std::string& json) {
  try {
    read_dump(json, "crafted.json");
  } catch (const DumpError& e) {
    return e.what();
  }
  return "";
}

TEST(HostileNumbers, ValuesBeyondTheirRangeMakeTheDumpUnreadable) {
  EXPECT_EQ(read_error(one_entry_dump("")), "");
  EXPECT_NE(read_error(one_entry_dump(R"("record_id": 549755813887)")).find("record_id 549755813887 is out of range"),
            std::string::npos);  // 2^39 - 1: its call index (record_id + 1) would not fit the analyzer's
  EXPECT_NE(read_error(one_entry_dump(R"("record_id": -1)")).find("record_id -1 is out of range"), std::string::npos);
  EXPECT_NE(read_error(one_entry_dump(R"("collective_seq_id": 4294967296)")).find("collective_seq_id"), std::string::npos);
  EXPECT_NE(read_error(one_entry_dump(R"("p2p_seq_id": 9223372036854775807)")).find("p2p_seq_id"), std::string::npos);
  EXPECT_NE(read_error(one_entry_dump(R"("time_discovered_completed_ns": 9223372036854775807)")).find("time_discovered_completed_ns"),
            std::string::npos);
  EXPECT_NE(read_error(one_entry_dump(R"("time_created_ns": -5)")).find("time_created_ns -5"), std::string::npos);
  EXPECT_NE(read_error(one_entry_dump(R"("timeout_ms": 9223372036854775807)")).find("timeout_ms"), std::string::npos);
  // A decimal string of 19 digits beyond int64 (JSON pg_status style) is no integer.
  EXPECT_NE(read_error(one_entry_dump(R"("op_id": "9999999999999999999")")).find("fits in 64 bits"), std::string::npos);
  EXPECT_EQ(read_error(one_entry_dump(R"("op_id": "9223372036854775807")")), "");
}

TEST(HostileNumbers, ElementCountsSaturate) {
  // 2^40 x 2^40 elements, and two tensors of 2^62: the count saturates at INT64_MAX / 2.
  FrDump d = read_dump(one_entry_dump(R"("input_sizes": [[1099511627776, 1099511627776], [4611686018427387904, 4611686018427387904]])"),
                       "crafted.json");
  Process p = to_process(d, 0);
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].count, INT64_MAX / 2);
  // A zero dimension makes the tensor empty, whatever the other dimensions.
  d = read_dump(one_entry_dump(R"("input_sizes": [[9223372036854775807, 9223372036854775807, 0], [3]])"), "crafted.json");
  EXPECT_EQ(to_process(d, 0).ops[0].count, 3);
}

}  // namespace
}  // namespace lockstep::flightrec
