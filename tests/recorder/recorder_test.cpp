// The recorder end to end against the stub NCCL/CUDA (tests/recorder/stub_*.cpp): run
// recorder_probe SCENARIO under LD_PRELOAD=liblockstep.so, then check the SQLite trace.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include "trace_test_util.h"

using namespace lockstep::test;

namespace lockstep::test {
std::map<std::string, std::string> recorder_env(const std::string& trace_dir) {
  return {{"LD_PRELOAD", LIBLOCKSTEP_PATH},
          {"LD_LIBRARY_PATH", STUB_LIB_DIR},
          {"LOCKSTEP_DIR", trace_dir},
          {"LOCKSTEP_STACKS", "native"}};
}
}  // namespace lockstep::test

namespace {

struct Probe {
  TempDir dir;
  ProcResult result;
  std::vector<std::string> files;
  double seconds = 0;  // the program's run, start to exit

  explicit Probe(std::vector<std::string> args, std::map<std::string, std::string> extra = {},
                 double timeout_s = 20) {
    std::map<std::string, std::string> env = recorder_env(dir.path);
    for (auto& [k, v] : extra) env[k] = v;
    args.insert(args.begin(), PROBE_PATH);
    const auto t0 = std::chrono::steady_clock::now();
    result = run(args, env, timeout_s);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    files = trace_files(dir.path);
  }
  std::string describe() const {
    return "exit " + std::to_string(result.exit_code) + " signal " +
           std::to_string(result.term_signal) + "\nstderr:\n" + result.err;
  }
};

#define ASSERT_ONE_TRACE(p)                                                          \
  ASSERT_EQ((p).result.exit_code, 0) << (p).describe();                              \
  ASSERT_EQ((p).files.size(), 1u) << "trace files: " << join((p).files) << "\n" << (p).describe()

}  // namespace

TEST(Recorder, records_every_collective_and_p2p_call_with_its_arguments) {
  Probe p({"basic"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto ops = t.rows("SELECT seq, op, dtype, count, root, peer, redop, state, rc FROM ops "
                    "ORDER BY call_index");
  std::vector<std::vector<std::string>> expected = {
      {"1", "all_reduce", "float32", "16", "NULL", "NULL", "sum", "enqueued", "0"},
      {"2", "broadcast", "int32", "8", "1", "NULL", "NULL", "enqueued", "0"},
      {"3", "broadcast", "int8", "9", "2", "NULL", "NULL", "enqueued", "0"},
      {"4", "reduce", "float64", "10", "3", "NULL", "max", "enqueued", "0"},
      {"5", "all_gather", "bfloat16", "11", "NULL", "NULL", "NULL", "enqueued", "0"},
      {"6", "reduce_scatter", "float16", "12", "NULL", "NULL", "avg", "enqueued", "0"},
      {"7", "all_to_all", "uint8", "13", "NULL", "NULL", "NULL", "enqueued", "0"},
      {"8", "gather", "int64", "14", "0", "NULL", "NULL", "enqueued", "0"},
      {"9", "scatter", "uint64", "15", "1", "NULL", "NULL", "enqueued", "0"},
      {"10", "send", "float32", "16", "NULL", "2", "NULL", "enqueued", "0"},
      {"11", "recv", "float32", "17", "NULL", "3", "NULL", "enqueued", "0"},
  };
  ASSERT_EQ(ops.size(), expected.size());
  for (size_t i = 0; i < ops.size(); i++)
    EXPECT_EQ(join(ops[i]), join(expected[i])) << "op row " << i;
}

TEST(Recorder, bcast_that_nccl_forwards_to_broadcast_is_recorded_once) {
  Probe p({"basic"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops WHERE op='broadcast'"), "2")
      << "one ncclBroadcast + one ncclBcast (whose inner ncclBroadcast must not be recorded)";
}

TEST(Recorder, communicator_row_has_identity_size_rank_and_end) {
  Probe p({"basic"}, {{"PROBE_NRANKS", "4"}, {"RANK", "2"}});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto c = t.rows("SELECT length(comm_hash), nranks, rank, cuda_device, init_rc, end_kind, "
                  "parent_id FROM comms");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(join(c[0]), "16,4,2,0,0,destroy,NULL");
  EXPECT_EQ(t.scalar("SELECT count(DISTINCT comm_id) FROM ops"), "1");
}

TEST(Recorder, communicator_identity_is_equal_on_all_members_and_differs_between_ids) {
  Probe r0({"basic"}, {{"RANK", "0"}});
  Probe r1({"basic"}, {{"RANK", "1"}});
  Probe other({"config_name"});
  ASSERT_ONE_TRACE(r0);
  ASSERT_ONE_TRACE(r1);
  ASSERT_ONE_TRACE(other);
  std::string h0 = Trace(r0.files[0]).scalar("SELECT comm_hash FROM comms");
  std::string h1 = Trace(r1.files[0]).scalar("SELECT comm_hash FROM comms");
  std::string h2 = Trace(other.files[0]).scalar("SELECT comm_hash FROM comms");
  EXPECT_EQ(h0, h1) << "same ncclUniqueId on two ranks";
  EXPECT_NE(h0, h2) << "different ncclUniqueId";
}

TEST(Recorder, group_of_send_recv_to_every_peer_is_one_all_to_all_with_per_peer_counts) {
  Probe p({"groups"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto first = t.rows("SELECT call_index, seq, op, count, dtype, group_id IS NOT NULL FROM ops "
                      "ORDER BY call_index LIMIT 1");
  ASSERT_EQ(first.size(), 1u);
  // sends of 10+11+12+13 elements
  EXPECT_EQ(join({first[0][1], first[0][2], first[0][3], first[0][4], first[0][5]}),
            "1,all_to_all,46,float32,1");
  auto parts = t.column("SELECT op || ':' || peer || ':' || count FROM op_parts WHERE call_index=" +
                        first[0][0] + " ORDER BY part");
  EXPECT_EQ(join(parts), "send:0:10,recv:0:20,send:1:11,recv:1:21,send:2:12,recv:2:22,"
                         "send:3:13,recv:3:23");
}

TEST(Recorder, groups_fold_to_coalesced_send_recv_and_per_comm_rows_with_continuing_seq) {
  Probe p({"groups"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto ops = t.rows("SELECT o.seq, o.op, o.count, c.id, o.group_id FROM ops o "
                    "JOIN comms c ON c.id=o.comm_id ORDER BY o.call_index");
  ASSERT_EQ(ops.size(), 7u);
  EXPECT_EQ(join({ops[1][0], ops[1][1], ops[1][2]}), "2,coalesced,11");
  EXPECT_EQ(t.scalar("SELECT group_concat(op || ':' || count) FROM (SELECT * FROM op_parts "
                     "WHERE call_index=(SELECT call_index FROM ops WHERE op='coalesced') "
                     "ORDER BY part)"),
            "all_reduce:5,all_reduce:6");
  EXPECT_EQ(join({ops[2][0], ops[2][1], ops[2][2]}), "3,send_recv,7");
  // group spanning two comms: two rows, same group id, each comm's own seq
  EXPECT_EQ(join({ops[3][0], ops[3][1], ops[3][2]}), "4,all_gather,3");
  EXPECT_EQ(join({ops[4][0], ops[4][1], ops[4][2]}), "1,all_gather,4");
  EXPECT_NE(ops[3][3], ops[4][3]) << "rows of different communicators";
  EXPECT_EQ(ops[3][4], ops[4][4]) << "one group id for the whole group";
  // a lone call in a group is that call
  EXPECT_EQ(join({ops[5][0], ops[5][1], ops[5][2]}), "5,broadcast,2");
  EXPECT_EQ(t.scalar("SELECT count(*) FROM op_parts WHERE call_index=(SELECT call_index FROM ops "
                     "WHERE op='broadcast')"),
            "0");
  EXPECT_EQ(join({ops[6][0], ops[6][1], ops[6][4]}), "6,all_reduce,NULL");
}

TEST(Recorder, failed_and_simulated_calls_are_recorded_outside_the_sequence) {
  Probe p({"errors"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto ops = t.rows("SELECT seq, op, count, state, rc FROM ops ORDER BY call_index");
  std::vector<std::string> got;
  for (auto& r : ops) got.push_back(join(r, "/"));
  // The failing call inside the group is recorded at once; the group's ok part fails with
  // its GroupEnd.
  EXPECT_EQ(join(got, " "),
            "1/all_reduce/1/enqueued/0 NULL/all_reduce/-1/failed/4 "
            "NULL/all_reduce/-1/failed/4 NULL/all_reduce/2/failed/4 "
            "NULL/all_reduce/3/simulated/0 2/all_reduce/4/enqueued/0");
}

TEST(Recorder, split_communicators_get_identities_that_match_across_ranks) {
  Probe r0({"split"}, {{"RANK", "0"}});
  Probe r1({"split"}, {{"RANK", "1"}});
  Probe r2({"split"}, {{"RANK", "2"}});
  ASSERT_ONE_TRACE(r0);
  ASSERT_ONE_TRACE(r1);
  ASSERT_ONE_TRACE(r2);
  auto q = "SELECT comm_hash FROM comms WHERE parent_id IS NOT NULL ORDER BY id";
  auto s0 = Trace(r0.files[0]).column(q), s1 = Trace(r1.files[0]).column(q),
       s2 = Trace(r2.files[0]).column(q);
  ASSERT_EQ(s0.size(), 2u);
  ASSERT_EQ(s2.size(), 2u);
  EXPECT_EQ(s0, s2) << "ranks 0 and 2 pass color 0 to both splits";
  EXPECT_NE(s0[0], s1[0]) << "rank 1 passes color 1";
  EXPECT_NE(s0[0], s0[1]) << "the second split of the same parent is another communicator";
  Trace t(r0.files[0]);
  EXPECT_EQ(t.scalar("SELECT split_color || '/' || split_key || '/' || nranks FROM comms "
                     "WHERE parent_id IS NOT NULL ORDER BY id LIMIT 1"),
            "0/0/2");
  EXPECT_EQ(t.scalar("SELECT detail FROM api_calls WHERE name='ncclCommSplit'"),
            "color=NCCL_SPLIT_NOCOLOR (no new comm)");
}

TEST(Recorder, reused_handle_after_destroy_is_a_new_communicator_starting_at_seq_1) {
  Probe p({"split"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto destroyed = t.rows("SELECT handle, id FROM comms WHERE end_kind='destroy'");
  ASSERT_EQ(destroyed.size(), 1u);
  auto last = t.rows("SELECT o.seq, c.id, c.handle FROM ops o JOIN comms c ON c.id=o.comm_id "
                     "ORDER BY o.call_index DESC LIMIT 1");
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0][0], "1");
  EXPECT_NE(last[0][1], destroyed[0][1]);
}

TEST(Recorder, communicator_name_comes_from_nccl_config) {
  Probe p({"config_name"});
  ASSERT_ONE_TRACE(p);
  EXPECT_EQ(Trace(p.files[0]).scalar("SELECT name FROM comms"), "tp_group");
}

TEST(Recorder, stacks_name_the_calling_function_and_are_deduplicated) {
  Probe p({"threads"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops WHERE stack_id IS NULL"), "0");
  // 2000 calls from a handful of call sites
  int stacks = std::stoi(t.scalar("SELECT count(*) FROM stacks"));
  EXPECT_GT(stacks, 0);
  EXPECT_LE(stacks, 16) << "stacks are deduplicated by hash";

  Probe b({"basic"});
  ASSERT_ONE_TRACE(b);
  Trace bt(b.files[0]);
  auto funcs = bt.column(
      "SELECT f.function FROM ops o JOIN frames f ON f.stack_id=o.stack_id "
      "WHERE o.count=16 AND o.op='all_reduce' ORDER BY f.depth");
  EXPECT_EQ(funcs.size() >= 2 ? funcs[0] : "", "probe_issue_all_reduce") << join(funcs, " < ");
  EXPECT_NE(std::find(funcs.begin(), funcs.end(), "scenario_basic"), funcs.end())
      << join(funcs, " < ");
  EXPECT_NE(bt.scalar("SELECT module FROM frames WHERE function='probe_issue_all_reduce'")
                .find("recorder_probe"),
            std::string::npos);
  EXPECT_EQ(bt.meta("stack_mode"), "native");
}

// Memoized native frames (stack_capture.cpp): two callers that give the hook the same return
// address and stack depth still get their own stacks, every time.
TEST(Recorder, memoized_native_stacks_tell_callers_at_the_same_depth_apart) {
  Probe p({"memo_callers"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  for (const char* caller : {"probe_memo_caller_a", "probe_memo_caller_b"}) {
    const std::string count = std::string(caller) == "probe_memo_caller_a" ? "1" : "2";
    // every op of this caller has a stack naming it, none names the other
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops WHERE op='all_reduce' AND count=" + count), "300");
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops o WHERE o.op='all_reduce' AND o.count=" + count +
                       " AND EXISTS (SELECT 1 FROM frames f WHERE f.stack_id=o.stack_id AND "
                       "f.function='" + caller + "')"),
              "300")
        << caller;
  }
  EXPECT_EQ(t.scalar("SELECT count(DISTINCT stack_id) FROM ops WHERE op='all_reduce'"), "2");
  // The memo was used (far fewer unwinds than ops), and no sample disagreed with it.
  const std::string memo = t.meta("native_stack_memo");
  EXPECT_NE(memo.find("disagreed=0"), std::string::npos) << memo;
  long unwound = std::stol(memo.substr(memo.find("unwound=") + 8));
  EXPECT_LT(unwound, 300) << memo;
}

TEST(Recorder, stacks_off_leaves_stack_ids_null) {
  Probe p({"basic"}, {{"LOCKSTEP_STACKS", "none"}});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops WHERE stack_id IS NOT NULL"), "0");
  EXPECT_EQ(t.meta("stack_mode"), "none");
}

TEST(Recorder, every_enqueued_op_gets_a_completion_from_its_cuda_event) {
  Probe p({"basic"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops o LEFT JOIN completions c USING(call_index) "
                     "WHERE c.call_index IS NULL"),
            "0");
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops o JOIN completions c USING(call_index) "
                     "WHERE c.mono_ns < o.issue_mono_ns"),
            "0")
      << "completion before issue";
}

TEST(Recorder, environment_and_process_facts_are_recorded_once) {
  Probe p({"basic"}, {{"NCCL_DEBUG", "WARN"},
                      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
                      {"CUDA_VISIBLE_DEVICES", "0"},
                      {"LOCKSTEP_RANK", "5"},
                      {"RANK", "3"},
                      {"UNRELATED_VAR", "x"}});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT value FROM env WHERE name='NCCL_DEBUG'"), "WARN");
  EXPECT_EQ(t.scalar("SELECT value FROM env WHERE name='TORCH_NCCL_ASYNC_ERROR_HANDLING'"), "1");
  EXPECT_EQ(t.scalar("SELECT value FROM env WHERE name='CUDA_VISIBLE_DEVICES'"), "0");
  EXPECT_EQ(t.scalar("SELECT count(*) FROM env WHERE name='UNRELATED_VAR'"), "0");
  EXPECT_EQ(t.meta("global_rank"), "5");
  EXPECT_EQ(t.meta("global_rank_source"), "LOCKSTEP_RANK");
  EXPECT_EQ(t.meta("nccl_version"), "22809");
  EXPECT_NE(t.meta("nccl_library").find("libnccl.so.2"), std::string::npos) << t.meta("nccl_library");
  EXPECT_EQ(t.meta("cuda_driver_version"), "13000");
  EXPECT_EQ(t.meta("schema_version"), "3");
  EXPECT_EQ(t.meta("finished"), "1");
  EXPECT_EQ(t.meta("exit_reason"), "exit");
  EXPECT_EQ(t.meta("dropped_records"), "0");
  EXPECT_NE(t.meta("cmdline").find("recorder_probe basic"), std::string::npos) << t.meta("cmdline");
  EXPECT_EQ(t.scalar("PRAGMA application_id"), std::to_string(0x4C4B5354));
  // Rollback journal, truncate flavour on a local fs: the journal stays as an empty file
  // (journal mode is per connection, so only the writer's file system effects show it).
  EXPECT_EQ(t.meta("journal_mode"), "truncate");
  struct stat js {};
  ASSERT_EQ(stat((p.files[0] + "-journal").c_str(), &js), 0) << "no rollback journal file";
  EXPECT_EQ(js.st_size, 0);
  EXPECT_NE(stat((p.files[0] + "-wal").c_str(), &js), 0) << "not WAL";
  EXPECT_NE(p.files[0].find("-" + t.meta("pid") + ".lockstep.sqlite"), std::string::npos);
}

TEST(Recorder, nccl_found_when_linked_dlopened_global_or_local_through_an_extension) {
  struct Way {
    const char* name;
    std::vector<std::string> argv;
    int all_reduces;
  };
  for (const Way& way : {Way{"linked", {PROBE_PATH, "basic"}, 1},
                         Way{"dlopen RTLD_GLOBAL", {PROBE_DLOPEN_PATH, "global", PROBE_EXT_PATH}, 3},
                         Way{"dlopen RTLD_LOCAL", {PROBE_DLOPEN_PATH, "local", PROBE_EXT_PATH}, 3}}) {
    TempDir dir;
    ProcResult r = run(way.argv, recorder_env(dir.path));
    ASSERT_EQ(r.exit_code, 0) << way.name << "\n" << r.err;
    auto files = trace_files(dir.path);
    ASSERT_EQ(files.size(), 1u) << way.name << "\n" << r.err;
    Trace t(files[0]);
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops WHERE op='all_reduce' AND seq>0"),
              std::to_string(way.all_reduces))
        << way.name;
    EXPECT_NE(t.meta("nccl_library").find(STUB_LIB_DIR), std::string::npos)
        << way.name << ": " << t.meta("nccl_library");
  }
}

TEST(Recorder, preloaded_into_programs_that_never_call_nccl_it_creates_nothing) {
  TempDir dir;
  auto env = recorder_env(dir.path + "/trace");
  for (std::vector<std::string> argv :
       {std::vector<std::string>{"/bin/true"},
        std::vector<std::string>{"/bin/sh", "-c", "echo hi | cat | wc -c"},
        std::vector<std::string>{PROBE_PATH, "nothing"}}) {
    ProcResult r = run(argv, env);
    EXPECT_EQ(r.exit_code, 0) << argv[0];
    EXPECT_EQ(r.err, "") << argv[0];
    struct stat st;
    EXPECT_NE(stat((dir.path + "/trace").c_str(), &st), 0) << argv.back() << " created the trace dir";
  }
}

TEST(Recorder, forked_child_writes_its_own_trace_file) {
  Probe p({"fork"});
  ASSERT_EQ(p.result.exit_code, 0) << p.describe();
  ASSERT_EQ(p.files.size(), 2u) << join(p.files);
  std::vector<std::string> counts;
  for (auto& f : p.files) {
    Trace t(f);
    counts.push_back(t.meta("pid") + ":" + t.scalar("SELECT group_concat(count) FROM (SELECT count "
                                                    "FROM ops ORDER BY call_index)"));
  }
  // parent: counts 1 and 4; child: 2 and 3, on its own communicator (seq from 1)
  bool parent = false, child = false;
  for (auto& c : counts) {
    if (c.find(":1,4") != std::string::npos) parent = true;
    if (c.find(":2,3") != std::string::npos) child = true;
  }
  EXPECT_TRUE(parent && child) << join(counts, " ");
}

// SQLite's process-wide mutexes must not be inherited locked: forks land while the writer thread
// is inside SQLite (another thread floods ops), and every child still starts its own trace.
TEST(Recorder, children_forked_while_the_writer_is_busy_neither_hang_nor_lose_their_trace) {
  constexpr int kChildren = 40;
  Probe p({"fork_busy", std::to_string(kChildren)}, {}, 120);
  ASSERT_EQ(p.result.exit_code, 0) << p.describe();
  // A child forked while the writer spent over a second inside SQLite runs untraced, and says so.
  size_t untraced = 0, pos = 0;
  while ((pos = p.result.err.find("it runs untraced", pos)) != std::string::npos) untraced++, pos++;
  ASSERT_EQ(p.files.size() + untraced, size_t(kChildren) + 1) << join(p.files) << "\n" << p.describe();
  int children = 0;
  for (auto& f : p.files) {
    Trace t(f);
    const std::string counts =
        t.scalar("SELECT group_concat(count) FROM (SELECT count FROM ops ORDER BY call_index)");
    if (counts == "2,3") children++;
  }
  EXPECT_EQ(size_t(children), p.files.size() - 1) << join(p.files);
}

// A program that closes every descriptor and opens its own files and a pipe gets the recorder's
// numbers back. Before: the writer read the program's pipe (the program hung), wrote its wake-up
// bytes into the program's file at exit and in the signal flush, and SQLite read the program's
// file as the trace. Now the recorder checks each descriptor before using it: the program's
// bytes are its own, its fate unchanged, and the trace keeps what was committed, naming why it
// stopped.
TEST(Recorder, a_program_that_closes_every_descriptor_keeps_its_files_and_its_fate) {
  for (const bool term : {false, true}) {
    TempDir out;
    Probe p({"close_all_fds", out.path, term ? "term" : "exit"}, {}, 30);
    ASSERT_FALSE(p.result.timed_out) << "the program hung\n" << p.describe();
    if (term)
      EXPECT_EQ(p.result.term_signal, SIGTERM) << p.describe();
    else
      EXPECT_EQ(p.result.exit_code, 0) << p.describe();
    EXPECT_NE(p.result.out.find("pipe ok"), std::string::npos) << p.result.out << "\n" << p.describe();
    for (int i = 0; i < 6; i++)
      EXPECT_EQ(read_file(out.path + "/f" + std::to_string(i)), "data\n") << "f" << i << (term ? " (SIGTERM)" : "");
    ASSERT_EQ(p.files.size(), 1u) << p.describe();
    Trace t(p.files[0]);
    EXPECT_GE(std::stoll(t.scalar("SELECT count(*) FROM ops")), 20) << "what was committed before the close stays";
  }
}

TEST(Recorder, several_threads_on_several_communicators_keep_per_comm_sequences) {
  Probe p({"threads"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto per_comm = t.rows("SELECT comm_id, count(*), min(seq), max(seq), count(DISTINCT seq), "
                         "count(DISTINCT tid), sum(op='coalesced') FROM ops GROUP BY comm_id");
  ASSERT_EQ(per_comm.size(), 4u);
  for (auto& r : per_comm)
    EXPECT_EQ(join({r[1], r[2], r[3], r[4], r[5], r[6]}), "500,1,500,500,1,100") << "comm " << r[0];
  EXPECT_EQ(t.meta("dropped_records"), "0");
}

TEST(Recorder, unwritable_trace_dir_gives_one_warning_and_the_program_runs_untraced) {
  Probe p({"basic"}, {{"LOCKSTEP_DIR", "/dev/null/not-a-dir"}});
  EXPECT_EQ(p.result.exit_code, 0) << p.describe();
  size_t lines = 0, pos = 0;
  while ((pos = p.result.err.find("lockstep: ", pos)) != std::string::npos) lines++, pos++;
  EXPECT_EQ(lines, 1u) << p.result.err;
  EXPECT_NE(p.result.err.find("/dev/null/not-a-dir"), std::string::npos) << p.result.err;
}

TEST(Recorder, sigterm_flushes_the_trace_and_still_terminates_the_program) {
  TempDir dir;
  Child c({PROBE_PATH, "ops_then_wait", "2000"}, recorder_env(dir.path));
  ASSERT_TRUE(c.wait_for_output("ready", 15));
  c.signal(SIGTERM);
  ProcResult r = c.wait(10);
  EXPECT_EQ(r.term_signal, SIGTERM) << "the default action still runs after the flush";
  auto files = trace_files(dir.path);
  ASSERT_EQ(files.size(), 1u);
  Trace t(files[0]);
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops"), "2000");
  EXPECT_EQ(t.meta("exit_reason"), "SIGTERM");
}

TEST(Recorder, sigkill_keeps_everything_committed_a_second_earlier) {
  TempDir dir;
  Child c({PROBE_PATH, "ops_then_wait", "3000"}, recorder_env(dir.path));
  ASSERT_TRUE(c.wait_for_output("ready", 15));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  // While the process still runs (a hung job), another process reads the complete trace.
  auto files = trace_files(dir.path);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(Trace(files[0]).scalar("SELECT count(*) FROM ops"), "3000") << "read while running";
  c.signal(SIGKILL);
  ProcResult r = c.wait(10);
  EXPECT_EQ(r.term_signal, SIGKILL);
  Trace t(files[0]);
  EXPECT_EQ(t.scalar("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops"), "3000");
  EXPECT_EQ(t.meta("finished"), "0");
}

TEST(Recorder, stalled_ops_produce_one_hang_line_and_a_hang_row) {
  Probe p({"hang"}, {{"LOCKSTEP_HANG_TIMEOUT", "1"}, {"PROBE_SLEEP", "3"}, {"RANK", "0"}});
  ASSERT_ONE_TRACE(p);
  const std::string& err = p.result.err;
  size_t at = err.find("lockstep: rank 0 (pid ");
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find("lockstep: rank 0", at + 1), std::string::npos) << "one line per stall: " << err;
  EXPECT_NE(err.find("no NCCL progress for 1s; in flight: comm "), std::string::npos) << err;
  EXPECT_NE(err.find("seq 2 reduce_scatter count=64; trace: " + p.dir.path), std::string::npos) << err;
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT in_flight FROM hangs"), "1");
  EXPECT_EQ(t.scalar("SELECT group_concat(o.seq || ':' || (c.call_index IS NOT NULL)) FROM ops o "
                     "LEFT JOIN completions c USING(call_index)"),
            "1:1,2:0")
      << "seq 1 completed, seq 2 enqueued and never completed";
}

TEST(Recorder, hang_starts_the_analyzer_once_with_output_on_stderr) {
  TempDir tools;
  std::string script = tools.path + "/fake-lockstep";
  {
    FILE* f = fopen(script.c_str(), "w");
    fprintf(f, "#!/bin/sh\necho \"analyzer-ran: $1 $2\"\n");
    fclose(f);
    chmod(script.c_str(), 0755);
  }
  Probe p({"hang"}, {{"LOCKSTEP_HANG_TIMEOUT", "1"}, {"PROBE_SLEEP", "3"}, {"RANK", "0"},
                     {"LOCKSTEP_ANALYZER", script}});
  ASSERT_ONE_TRACE(p);
  EXPECT_NE(p.result.err.find("analyzer-ran: analyze " + p.dir.path), std::string::npos)
      << p.result.err;
  EXPECT_EQ(p.result.out.find("analyzer-ran"), std::string::npos) << "stdout went to stderr";
}

TEST(Recorder, graph_replays_record_one_sequenced_op_per_captured_op_per_launch) {
  Probe p({"graph"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto rows = t.rows("SELECT ifnull(seq,'-'), op, state, ifnull(origin_call,'-'), "
                     "ifnull(graph_exec,'-'), ifnull(graph_id,'-') FROM ops ORDER BY call_index");
  std::vector<std::string> got;
  for (auto& r : rows) got.push_back(r[0] + "/" + r[1] + "/" + r[2]);
  EXPECT_EQ(join(got, " "),
            "1/all_reduce/enqueued -/all_reduce/captured -/all_to_all/captured "
            "2/all_reduce/graph_launched 3/all_to_all/graph_launched "
            "4/all_reduce/graph_launched 5/all_to_all/graph_launched "
            "6/all_reduce/graph_launched 7/all_to_all/graph_launched 8/all_reduce/enqueued");
  EXPECT_EQ(rows[1][5], std::to_string(0x6A0)) << "graph id of the capture";
  EXPECT_EQ(rows[3][3], t.scalar("SELECT call_index FROM ops WHERE state='captured' LIMIT 1"));
  EXPECT_EQ(rows[3][4], std::to_string(0xE0E0));
  EXPECT_EQ(t.scalar("SELECT count(*) FROM graph_launches WHERE graph_exec=" +
                     std::to_string(0xE0E0)),
            "3");
  EXPECT_EQ(t.scalar("SELECT count(*) FROM completions JOIN ops USING(call_index) "
                     "WHERE state='captured'"),
            "0")
      << "no event is recorded on a capturing stream";
  EXPECT_EQ(t.scalar("SELECT group_concat(kind) FROM waits"), "stream_sync");
}

TEST(Recorder, a_failed_event_record_writes_no_row) {
  Probe p({"event_records"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto rows = t.rows("SELECT kind, printf('%x', event), printf('%x', stream) FROM waits ORDER BY call_index");
  std::vector<std::string> got;
  for (auto& r : rows) got.push_back(r[0] + "/" + r[1] + "/" + r[2]);
  EXPECT_EQ(join(got, " "),
            "event_record/e100/51 stream_wait_event/e100/52 event_sync/e100/0 stream_wait_event/bad0/51")
      << "a record that failed left the event where it was: the wait on it has no record to take";
}

// The program's exit waits for the recorder's threads within a bound: a watchdog stuck in a
// driver call (here every cuEventQuery sleeps 60 s) is not waited for past 2 s.
TEST(Recorder, a_watchdog_stuck_in_the_driver_does_not_hold_the_programs_exit) {
  Probe p({"basic"}, {{"STUB_CUDA_QUERY_STALL_S", "60"}}, 40);
  const double s = p.seconds;
  ASSERT_ONE_TRACE(p);
  EXPECT_LT(s, 20) << "the exit waited for the stuck watchdog";
  Trace t(p.files[0]);
  EXPECT_NE(t.meta("watchdog_at_exit").find("not waited for"), std::string::npos);
  EXPECT_EQ(t.meta("exit_reason"), "exit") << "the writer's final commit still ran";
}

// A writer stuck writing (a dead file system: its writes sleep 60 s) holds the exit 10 s at
// most; the program's output and exit code are its own.
TEST(Recorder, a_writer_stuck_on_its_file_does_not_hold_the_programs_exit) {
  Probe p({"basic"}, {{"LD_PRELOAD", std::string(LIBLOCKSTEP_PATH) + ":" + FAILWRITE_SHIM_PATH},
                      {"LOCKSTEP_TEST_STALL_WRITER_S", "60"}}, 50);
  const double s = p.seconds;
  EXPECT_EQ(p.result.exit_code, 0) << p.describe();
  EXPECT_EQ(p.result.term_signal, 0) << p.describe();
  EXPECT_LT(s, 30) << "the exit waited for the stuck writer";
  EXPECT_NE(p.result.err.find("final commit did not finish"), std::string::npos) << p.describe();
}

// A final commit on a slow file system that still writes (each write takes 100 ms: the exit
// waits ~5 s for the writer's backlog) is waited for past LOCKSTEP_EXIT_WAIT (here 1.5 s
// without progress), which bounds only a commit that makes none (and 6 times as long in all):
// the trace ends with its exit record.
TEST(Recorder, a_slow_final_commit_that_progresses_is_waited_for) {
  Probe p({"basic"}, {{"LD_PRELOAD", std::string(LIBLOCKSTEP_PATH) + ":" + FAILWRITE_SHIM_PATH},
                      {"LOCKSTEP_TEST_SLOW_WRITER_MS", "100"},
                      {"LOCKSTEP_EXIT_WAIT", "1.5"}}, 60);
  const double s = p.seconds;
  EXPECT_EQ(p.result.exit_code, 0) << p.describe();
  EXPECT_EQ(p.result.err.find("final commit did not finish"), std::string::npos) << p.describe();
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.meta("exit_reason"), "exit") << "the final commit was left behind";
  EXPECT_GT(s, 2.0) << "the exit did not outlast LOCKSTEP_EXIT_WAIT: the test proves nothing";
}

// The same file system dead at exit (writes sleep 60 s): LOCKSTEP_EXIT_WAIT=0.5 lets the
// program go after 0.5 s without progress.
TEST(Recorder, a_final_commit_without_progress_holds_the_exit_only_the_exit_wait) {
  Probe p({"basic"}, {{"LD_PRELOAD", std::string(LIBLOCKSTEP_PATH) + ":" + FAILWRITE_SHIM_PATH},
                      {"LOCKSTEP_TEST_STALL_WRITER_S", "60"},
                      {"LOCKSTEP_EXIT_WAIT", "0.5"}}, 50);
  const double s = p.seconds;
  EXPECT_EQ(p.result.exit_code, 0) << p.describe();
  EXPECT_LT(s, 8) << "the exit waited past LOCKSTEP_EXIT_WAIT";
  EXPECT_NE(p.result.err.find("final commit did not finish"), std::string::npos) << p.describe();
}

TEST(Recorder, destroyed_graph_and_exec_handles_do_not_replay_their_old_ops_when_reused) {
  Probe p({"graph_handle_reuse"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT group_concat(x, ' ') FROM (SELECT ifnull(seq,'-') || '/' || op || "
                     "'/' || state AS x FROM ops ORDER BY call_index)"),
            "-/all_reduce/captured 1/all_reduce/graph_launched 2/all_reduce/enqueued")
      << "one replay (the exec outlived its graph); none for the stale exec or the new graph "
         "without NCCL ops that got the same handle values";
  EXPECT_EQ(t.scalar("SELECT count(*) FROM graph_launches"), "1");
}

TEST(Recorder, in_progress_op_completes_only_after_its_communicator_reports_success) {
  Probe p({"nonblocking"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT group_concat(x, ' ') FROM (SELECT seq || '/' || state || '/' || rc "
                     "AS x FROM ops ORDER BY call_index)"),
            "1/enqueued/7 2/enqueued/7");
  // Each op's completion event may only be recorded once ncclCommGetAsyncError said
  // ncclSuccess, i.e. after the marker wait that precedes the polls (an event recorded at the
  // call itself would have completed 100 ms before the marker).
  auto rows = t.rows("SELECT o.seq, ifnull(c.mono_ns, 'none'), (SELECT w.begin_mono_ns FROM "
                     "waits w WHERE w.call_index > o.call_index ORDER BY w.call_index LIMIT 1) "
                     "FROM ops o LEFT JOIN completions c USING(call_index) ORDER BY o.call_index");
  ASSERT_EQ(rows.size(), 2u);
  for (auto& r : rows) {
    ASSERT_NE(r[1], "none") << "op seq " << r[0] << " has no completion";
    EXPECT_GT(std::stoll(r[1]), std::stoll(r[2]))
        << "op seq " << r[0] << " completed at " << r[1] << ", before its communicator left "
        << "ncclInProgress (marker at " << r[2] << ")";
  }
}

TEST(Recorder, sigint_chains_to_the_handler_the_program_installed_before) {
  TempDir dir;
  Child c({PROBE_PATH, "own_sigint_handler"}, recorder_env(dir.path));
  ASSERT_TRUE(c.wait_for_output("ready", 15));
  c.signal(SIGINT);
  ProcResult r = c.wait(10);
  EXPECT_EQ(r.exit_code, 0) << "the program's handler decides, and it exits cleanly\n" << r.err;
  EXPECT_NE(r.out.find("app handler ran"), std::string::npos) << r.out;
  auto files = trace_files(dir.path);
  ASSERT_EQ(files.size(), 1u);
  Trace t(files[0]);
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops"), "10");
  EXPECT_EQ(t.meta("exit_reason"), "exit") << "it went on to exit normally";
}

// LOCKSTEP_SIGUSR1=flush (what `lockstep run` sets): SIGUSR1 only flushes.
TEST(Recorder, sigusr1_flushes_without_stopping_the_program_when_asked_to) {
  TempDir dir;
  auto env = recorder_env(dir.path);
  env["LOCKSTEP_SIGUSR1"] = "flush";
  Child c({PROBE_PATH, "ops_then_wait", "100"}, env);
  ASSERT_TRUE(c.wait_for_output("ready", 15));
  c.signal(SIGUSR1);
  auto files = trace_files(dir.path);
  ASSERT_EQ(files.size(), 1u);
  // The flush is asynchronous to this test (the writer thread commits, the handler waits for it):
  // poll for its marker instead of assuming a latency, which a loaded machine does not keep.
  for (int i = 0; i < 200 && Trace(files[0]).meta("exit_reason") != "SIGUSR1"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    Trace t(files[0]);
    EXPECT_EQ(t.meta("exit_reason"), "SIGUSR1") << "the flush it asked for was committed";
    EXPECT_EQ(t.scalar("SELECT count(*) FROM ops"), "100");
  }
  c.signal(SIGTERM);
  ProcResult r = c.wait(10);
  EXPECT_EQ(r.term_signal, SIGTERM) << "still running after SIGUSR1, stopped by SIGTERM";
}

// Without the opt-in, the program's fate is what it would be without the recorder: a program
// that never handled SIGUSR1 dies of it, after the recorder flushed its trace.
TEST(Recorder, sigusr1_over_the_default_action_flushes_then_kills_as_without_the_recorder) {
  TempDir dir;
  Child c({PROBE_PATH, "ops_then_wait", "100"}, recorder_env(dir.path));
  ASSERT_TRUE(c.wait_for_output("ready", 15));
  c.signal(SIGUSR1);
  ProcResult r = c.wait(10);
  EXPECT_EQ(r.term_signal, SIGUSR1) << "killed by SIGUSR1, as without the recorder\n" << r.err;
  auto files = trace_files(dir.path);
  ASSERT_EQ(files.size(), 1u);
  Trace t(files[0]);
  EXPECT_EQ(t.meta("exit_reason"), "SIGUSR1_default") << "its death is recorded, not a flush request";
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops"), "100");
}

TEST(Recorder, comm_abort_commits_the_trace_before_returning) {
  Probe p({"abort_then_kill"});
  EXPECT_EQ(p.result.term_signal, SIGKILL) << p.describe();
  ASSERT_EQ(p.files.size(), 1u);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops"), "50");
  EXPECT_EQ(t.scalar("SELECT end_kind FROM comms"), "abort");
}

TEST(Recorder, records_the_writer_cannot_keep_up_with_are_counted_not_lost_silently) {
  const int n = 400000;
  Probe p({"flood", std::to_string(n)}, {{"LOCKSTEP_STACKS", "none"}});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  long rows = std::stol(t.scalar("SELECT count(*) FROM ops"));
  long dropped = std::stol(t.meta("dropped_records"));
  // Each op is one record; completions are records too (the stub CUDA completes every op).
  long completions = std::stol(t.scalar("SELECT count(*) FROM completions"));
  // Schema 2 keeps a completion in its op's row: one whose op record was dropped is counted.
  long orphans = std::stol(t.meta("completions_without_op"));
  EXPECT_EQ(rows + completions + orphans + dropped, 2L * n)
      << rows << " ops rows + " << completions << " completions + " << orphans << " completions without op + "
      << dropped << " dropped";
  EXPECT_EQ(t.scalar("SELECT count(*) FROM ops o JOIN ops p ON p.comm_id=o.comm_id AND p.seq=o.seq "
                     "AND p.call_index<>o.call_index"),
            "0")
      << "no sequence number is handed out twice";
}

TEST(Recorder, full_disk_gives_one_warning_and_the_program_continues_untraced) {
  Probe p({"disk_full", "10000"}, {{"LOCKSTEP_STACKS", "none"}});
  EXPECT_EQ(p.result.exit_code, 0) << p.describe();
  EXPECT_NE(p.result.out.find("all 10000 ops returned ncclSuccess"), std::string::npos);
  size_t lines = 0, pos = 0;
  while ((pos = p.result.err.find("lockstep: ", pos)) != std::string::npos) lines++, pos++;
  EXPECT_EQ(lines, 1u) << p.result.err;
  EXPECT_NE(p.result.err.find("the program continues untraced"), std::string::npos) << p.result.err;
  ASSERT_EQ(p.files.size(), 1u);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("PRAGMA integrity_check"), "ok") << "what was committed stays readable";
  EXPECT_GT(std::stol(t.scalar("SELECT count(*) FROM ops")), 0);
}

TEST(Recorder, calls_on_a_null_communicator_are_failed_rows_of_one_placeholder_comm) {
  Probe p({"null_comm"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  EXPECT_EQ(t.scalar("SELECT count(*) || ':' || name || ':' || handle FROM comms"),
            "1:(null communicator):0");
  EXPECT_EQ(t.scalar("SELECT count(*) || ':' || group_concat(DISTINCT state) || ':' || "
                     "count(seq) FROM ops"),
            "3:failed:0");
}

TEST(Recorder, other_communicator_calls_are_recorded_with_identities_and_api_rows) {
  Probe p({"lifecycle"});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto comms = t.rows("SELECT id, nranks, rank, ifnull(parent_id,'-'), ifnull(end_kind,'-'), "
                      "comm_hash FROM comms ORDER BY id");
  ASSERT_EQ(comms.size(), 5u);
  // InitAll: ranks 0 and 1 of one communicator, both handles in this process.
  EXPECT_EQ(join({comms[0][1], comms[0][2], comms[0][4]}), "2,0,destroy") << "finalize, then destroy";
  EXPECT_EQ(join({comms[1][1], comms[1][2], comms[1][4]}), "2,1,revoke");
  EXPECT_EQ(comms[0][5], comms[1][5]) << "the ranks of one InitAll communicator share its identity";
  EXPECT_EQ(join({comms[2][1], comms[2][2], comms[2][3]}), "4,1,-") << "InitRankScalable";
  EXPECT_EQ(join({comms[3][1], comms[3][2], comms[3][3]}), "3,1," + comms[2][0]) << "shrink";
  EXPECT_NE(comms[3][5], comms[2][5]);
  EXPECT_EQ(t.scalar("SELECT group_concat(name || ':' || rc || ':' || ifnull(detail,''), ' ') FROM "
                     "(SELECT * FROM api_calls ORDER BY call_index)"),
            "ncclCommRegister:0:buff=" + t.scalar("SELECT substr(detail, 6, instr(detail, ' ')-6) "
                                                  "FROM api_calls WHERE name='ncclCommRegister'") +
                " size=256 ncclCommDeregister:0: ncclCommGetAsyncError:0:asyncError=6");
}

TEST(Recorder, only_the_lowest_rank_with_a_trace_in_the_directory_starts_the_analyzer) {
  TempDir tools, dir;
  std::string script = tools.path + "/fake-lockstep";
  {
    FILE* f = fopen(script.c_str(), "w");
    fprintf(f, "#!/bin/sh\necho analyzer-ran\n");
    fclose(f);
    chmod(script.c_str(), 0755);
  }
  auto env = recorder_env(dir.path);
  env["LOCKSTEP_HANG_TIMEOUT"] = "1";
  env["PROBE_SLEEP"] = "2";
  env["LOCKSTEP_ANALYZER"] = script;
  // Rank 3 alone: the lowest rank it can see is its own.
  env["RANK"] = "3";
  ProcResult alone = run({PROBE_PATH, "hang"}, env);
  EXPECT_NE(alone.err.find("analyzer-ran"), std::string::npos) << alone.err;
  // Rank 2 of 4 beside rank 1's trace (rank 1 ran first, without hanging): rank 1 is lower.
  env["RANK"] = "1";
  ASSERT_EQ(run({PROBE_PATH, "basic"}, env).exit_code, 0);
  env["RANK"] = "2";
  ProcResult r2 = run({PROBE_PATH, "hang"}, env);
  EXPECT_NE(r2.err.find("lockstep: rank 2"), std::string::npos) << "the hang line itself: " << r2.err;
  EXPECT_EQ(r2.err.find("analyzer-ran"), std::string::npos) << r2.err;
}

TEST(Recorder, completions_arrive_in_stream_order_no_earlier_than_the_work_finished) {
  Probe p({"slow_stream"}, {{"LOCKSTEP_STACKS", "none"}});
  ASSERT_ONE_TRACE(p);
  Trace t(p.files[0]);
  auto rows = t.rows("SELECT o.issue_mono_ns, c.mono_ns FROM ops o LEFT JOIN completions c "
                     "USING(call_index) ORDER BY o.call_index");
  ASSERT_EQ(rows.size(), 60u);
  int64_t prev = 0;
  std::set<std::string> distinct;
  for (size_t i = 0; i < rows.size(); i++) {
    ASSERT_NE(rows[i][1], "NULL") << "op " << i << " never completed";
    int64_t issued = std::stoll(rows[i][0]), done = std::stoll(rows[i][1]);
    EXPECT_GE(done - issued, 100000000) << "op " << i << " completed before its 100 ms of work";
    EXPECT_LE(done - issued, 1000000000) << "op " << i << " completion noticed late";
    EXPECT_GE(done, prev) << "op " << i;
    prev = done;
    distinct.insert(rows[i][1]);
  }
  EXPECT_GT(distinct.size(), 5u) << "ops completed over several polls, not all at once";
}
