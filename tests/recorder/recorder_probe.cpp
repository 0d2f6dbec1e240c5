// A program that calls NCCL in one named way per scenario, run under LD_PRELOAD=liblockstep.so
// by recorder_test.cpp, which then checks the trace it left. Linked with -rdynamic so stack
// frames carry these function names.
//   recorder_probe SCENARIO [args]     (env PROBE_NRANKS, RANK: communicator size and rank)
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "stub_cuda.h"

namespace {

int env_int(const char* name, int dflt) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

cudaStream_t stream(uintptr_t v = 0x5000) { return reinterpret_cast<cudaStream_t>(v); }

#define CHECK(call)                                                               \
  do {                                                                            \
    ncclResult_t rc_ = (call);                                                    \
    if (rc_ != ncclSuccess) {                                                     \
      fprintf(stderr, "probe: %s failed: %d (line %d)\n", #call, int(rc_), __LINE__); \
      exit(2);                                                                    \
    }                                                                             \
  } while (0)

ncclComm_t init_comm(char id_byte = 1) {
  ncclUniqueId id;
  memset(&id, id_byte, sizeof id);
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRank(&c, env_int("PROBE_NRANKS", 4), id, env_int("RANK", 0)));
  return c;
}

float buf[64];

}  // namespace

extern "C" {
// Named, exported functions: the tests look for them in the recorded stacks.
__attribute__((noinline)) void probe_issue_all_reduce(ncclComm_t c, size_t n) {
  CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c, stream()));
}

int scenario_basic() {
  ncclComm_t c = init_comm();
  probe_issue_all_reduce(c, 16);
  CHECK(ncclBroadcast(buf, buf, 8, ncclInt32, 1, c, stream()));
  CHECK(ncclBcast(buf, 9, ncclInt8, 2, c, stream()));  // one record, not two
  CHECK(ncclReduce(buf, buf, 10, ncclFloat64, ncclMax, 3, c, stream()));
  CHECK(ncclAllGather(buf, buf, 11, ncclBfloat16, c, stream()));
  CHECK(ncclReduceScatter(buf, buf, 12, ncclFloat16, ncclAvg, c, stream()));
  CHECK(ncclAlltoAll(buf, buf, 13, ncclUint8, c, stream()));
  CHECK(ncclGather(buf, buf, 14, ncclInt64, 0, c, stream()));
  CHECK(ncclScatter(buf, buf, 15, ncclUint64, 1, c, stream()));
  CHECK(ncclSend(buf, 16, ncclFloat32, 2, c, stream()));
  CHECK(ncclRecv(buf, 17, ncclFloat32, 3, c, stream()));
  CHECK(ncclCommDestroy(c));
  return 0;
}

int scenario_groups() {
  ncclComm_t c = init_comm();           // 4 ranks, this is rank RANK (0)
  ncclComm_t d = init_comm(2);
  int me = env_int("RANK", 0), n = env_int("PROBE_NRANKS", 4);
  // 1. send+recv with every peer, uneven counts, self included -> all_to_all
  CHECK(ncclGroupStart());
  for (int p = 0; p < n; p++) {
    CHECK(ncclSend(buf, 10 + p, ncclFloat32, p, c, stream()));
    CHECK(ncclRecv(buf, 20 + p, ncclFloat32, p, c, stream()));
  }
  CHECK(ncclGroupEnd());
  // 2. two collectives -> coalesced
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(buf, buf, 5, ncclFloat32, ncclSum, c, stream()));
  CHECK(ncclAllReduce(buf, buf, 6, ncclFloat32, ncclSum, c, stream()));
  CHECK(ncclGroupEnd());
  // 3. a pipeline exchange with one neighbour -> send_recv
  CHECK(ncclGroupStart());
  CHECK(ncclSend(buf, 7, ncclFloat32, (me + 1) % n, c, stream()));
  CHECK(ncclRecv(buf, 7, ncclFloat32, (me + n - 1) % n, c, stream()));
  CHECK(ncclGroupEnd());
  // 4. nested groups across two communicators -> one row per comm, shared group id
  CHECK(ncclGroupStart());
  CHECK(ncclAllGather(buf, buf, 3, ncclInt32, c, stream()));
  CHECK(ncclGroupStart());
  CHECK(ncclAllGather(buf, buf, 4, ncclInt32, d, stream()));
  CHECK(ncclGroupEnd());
  CHECK(ncclGroupEnd());
  // 5. a lone call inside a group -> the call itself
  CHECK(ncclGroupStart());
  CHECK(ncclBroadcast(buf, buf, 2, ncclInt32, 0, c, stream()));
  CHECK(ncclGroupEnd());
  // 6. an ungrouped op afterwards: seq continues
  CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, stream()));
  return 0;
}

int scenario_errors() {
  ncclComm_t c = init_comm();
  CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, stream()));            // seq 1
  if (ncclAllReduce(buf, buf, SIZE_MAX, ncclFloat32, ncclSum, c, stream()) == ncclSuccess)
    return 3;                                                                       // failed
  CHECK(ncclGroupStart());                                                          // failed group
  CHECK(ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, c, stream()));
  ncclAllReduce(buf, buf, SIZE_MAX, ncclFloat32, ncclSum, c, stream());
  if (ncclGroupEnd() == ncclSuccess) return 4;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;                                    // simulated
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(buf, buf, 3, ncclFloat32, ncclSum, c, stream()));
  CHECK(ncclGroupSimulateEnd(&sim));
  CHECK(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c, stream()));            // seq 2
  return 0;
}

int scenario_split() {
  ncclComm_t world = init_comm();
  int me = env_int("RANK", 0);
  ncclComm_t half = nullptr, again = nullptr;
  CHECK(ncclCommSplit(world, me % 2, me, &half, nullptr));
  CHECK(ncclCommSplit(world, me % 2, me, &again, nullptr));  // second split: another identity
  CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, half, stream()));
  CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, again, stream()));
  CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, world, stream()));
  ncclComm_t none = nullptr;
  CHECK(ncclCommSplit(world, NCCL_SPLIT_NOCOLOR, me, &none, nullptr));
  // Handle reuse: destroy and create again; the new comm must get a new id and seq 1.
  CHECK(ncclCommDestroy(half));
  ncclComm_t fresh = init_comm(9);
  CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, fresh, stream()));
  return 0;
}

int scenario_config_name() {
  ncclUniqueId id;
  memset(&id, 3, sizeof id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "tp_group";
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRankConfig(&c, 2, id, 0, &cfg));
  CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, stream()));
  return 0;
}

int scenario_threads() {
  int nthreads = 4, per = 500;
  std::vector<std::thread> ts;
  for (int t = 0; t < nthreads; t++)
    ts.emplace_back([t, per] {
      ncclComm_t c = init_comm(char(10 + t));
      for (int i = 0; i < per; i++) {
        if (i % 5 == 0) {
          CHECK(ncclGroupStart());
          CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, stream()));
          CHECK(ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, c, stream()));
          CHECK(ncclGroupEnd());
        } else {
          CHECK(ncclAllReduce(buf, buf, size_t(t), ncclFloat32, ncclSum, c, stream()));
        }
      }
    });
  for (auto& t : ts) t.join();
  return 0;
}

int scenario_fork() {
  ncclComm_t c = init_comm();
  probe_issue_all_reduce(c, 1);
  pid_t child = fork();
  if (child == 0) {
    ncclComm_t cc = init_comm(5);
    probe_issue_all_reduce(cc, 2);
    probe_issue_all_reduce(cc, 3);
    exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  probe_issue_all_reduce(c, 4);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 5;
}

// fork() while the writer is busy: a second thread floods ops, so the writer thread is inside
// SQLite most of the time; the main thread forks n children, each of which traces two ops of its
// own. A child stuck (SQLite's global mutex inherited locked) is killed after 20 s: exit 6.
int scenario_fork_busy(int n) {
  ncclComm_t c = init_comm();
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    for (size_t i = 0; !stop.load(); i++) probe_issue_all_reduce(c, 100 + i % 7);
  });
  // The recorder's lazy first uses (the first unwind, the writer's first round) are over before
  // the first fork: a fork during another thread's dlopen is glibc's own hazard (ld.so asserts in
  // the child's next dlopen), not the one tested here.
  usleep(300000);
  int failed = 0;
  for (int k = 0; k < n && !failed; k++) {
    usleep(2000);
    pid_t child = fork();
    if (child == 0) {
      ncclComm_t cc = init_comm(5);
      probe_issue_all_reduce(cc, 2);
      probe_issue_all_reduce(cc, 3);
      exit(0);  // the recorder's exit handler commits the child's two ops
    }
    int status = 0;
    for (int waited_ms = 0; waitpid(child, &status, WNOHANG) == 0; waited_ms += 10) {
      if (waited_ms >= 20000) {
        fprintf(stderr, "probe: child %d of %d (pid %d) did not exit in 20 s\n", k + 1, n, int(child));
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        failed = 6;
        break;
      }
      usleep(10000);
    }
    if (!failed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failed = 5;
  }
  stop.store(true);
  flood.join();
  return failed;
}

// Ops on a stream whose events never complete: the watchdog must report a hang.
int scenario_hang() {
  ncclComm_t c = init_comm();
  probe_issue_all_reduce(c, 1);
  CHECK(ncclReduceScatter(buf, buf, 64, ncclFloat32, ncclSum, c, stream(stub_cuda::kStuckStream)));
  sleep(unsigned(env_int("PROBE_SLEEP", 3)));
  return 0;
}

// N ops, then "ready" on stdout, then a sleep (the test signals or kills it meanwhile).
int scenario_ops_then_wait(int n) {
  ncclComm_t c = init_comm();
  for (int i = 0; i < n; i++) probe_issue_all_reduce(c, size_t(i));
  printf("ready\n");
  fflush(stdout);
  // A signal handler (SIGUSR1 flush) interrupts sleep(): sleep until the deadline regardless.
  unsigned left = unsigned(env_int("PROBE_SLEEP", 30));
  while (left > 0) left = sleep(left);
  return 0;
}

int scenario_graph() {
  ncclComm_t c = init_comm();
  probe_issue_all_reduce(c, 1);                                                       // seq 1
  cudaStream_t cap = stream(stub_cuda::kCapturingStream);
  CHECK(ncclAllReduce(buf, buf, 32, ncclFloat32, ncclSum, c, cap));                  // captured
  CHECK(ncclGroupStart());
  for (int p = 0; p < env_int("PROBE_NRANKS", 4); p++) {
    CHECK(ncclSend(buf, 8, ncclFloat32, p, c, cap));
    CHECK(ncclRecv(buf, 8, ncclFloat32, p, c, cap));
  }
  CHECK(ncclGroupEnd());                                                              // captured
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(cap, &g);
  cudaGraphExec_t exec = nullptr;
  cudaGraphInstantiate(&exec, g, 0);
  for (int i = 0; i < 3; i++) cudaGraphLaunch(exec, stream());                      // 3 replays
  cudaStreamSynchronize(stream());
  probe_issue_all_reduce(c, 2);                                                       // seq 8
  return 0;
}

// Destroyed graphs and execs whose handle values come back (the stub always hands out kGraph
// and kGraphExec): only what the live exec was instantiated from may be replayed.
int scenario_graph_handle_reuse() {
  ncclComm_t c = init_comm();
  cudaStream_t cap = stream(stub_cuda::kCapturingStream);
  CHECK(ncclAllReduce(buf, buf, 32, ncclFloat32, ncclSum, c, cap));                  // captured
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(cap, &g);
  cudaGraphExec_t exec = nullptr;
  cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);              // CUDA lets the exec outlive its graph: it still replays
  cudaGraphLaunch(exec, stream());                                                    // seq 1
  cudaGraphExecDestroy(exec);
  cudaGraphLaunch(exec, stream());  // the stale value (the stub accepts it): nothing to replay
  cudaGraph_t g2 = nullptr;         // a capture without NCCL ops, same handle values
  cudaStreamEndCapture(cap, &g2);
  cudaGraphExec_t exec2 = nullptr;
  cudaGraphInstantiate(&exec2, g2, 0);
  if (g2 != g || exec2 != exec) return 6;  // the stub no longer reuses handles: test is moot
  cudaGraphLaunch(exec2, stream());                                                   // nothing
  probe_issue_all_reduce(c, 2);                                                       // seq 2
  return 0;
}

// An op on a nonblocking communicator returns ncclInProgress, and the stub's async state stays
// ncclInProgress for a few polls. "marker" (an event sync, recorded as a wait) is called after
// the op but before any poll: the op's completion must come after it.
int scenario_nonblocking() {
  ncclUniqueId id;
  memset(&id, 4, sizeof id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRankConfig(&c, 2, id, 0, &cfg));
  for (int i = 0; i < 2; i++) {
    if (ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, stream()) != ncclInProgress) return 7;
    usleep(100000);  // ten watchdog polls: an event recorded at the call would complete now
    cudaEventSynchronize(nullptr);  // marker
    ncclResult_t async = ncclInProgress;
    int polls = 0;
    while (async == ncclInProgress) {
      CHECK(ncclCommGetAsyncError(c, &async));
      polls++;
    }
    if (async != ncclSuccess || polls < 2) return 8;  // the stub must report InProgress first
  }
  usleep(100000);  // let the watchdog see the completions
  return 0;
}

int scenario_nothing() { return 0; }

// Host waits and event records after the first NCCL call: a row each, but for a record that
// failed (the stub fails a record of 0xbad0).
int scenario_event_records() {
  auto ev = [](uintptr_t v) { return reinterpret_cast<cudaEvent_t>(v); };
  ncclComm_t c = init_comm();
  probe_issue_all_reduce(c, 1);  // the runtime hooks record only once NCCL was called
  cudaEventRecord(ev(0xe100), stream(0x51));
  cudaStreamWaitEvent(stream(0x52), ev(0xe100), 0);
  cudaEventSynchronize(ev(0xe100));
  if (cudaEventRecord(ev(0xbad0), stream(0x51)) == cudaSuccess) return 9;  // stub changed
  cudaStreamWaitEvent(stream(0x51), ev(0xbad0), 0);
  cudaEventDestroy(ev(0xe100));
  probe_issue_all_reduce(c, 1);
  return 0;
}

// 60 ops 3 ms apart on a stream whose work takes 100 ms: every watchdog poll sees some of
// them complete and some not.
int scenario_slow_stream() {
  ncclComm_t c = init_comm();
  for (int i = 0; i < 60; i++) {
    CHECK(ncclAllReduce(buf, buf, size_t(i), ncclFloat32, ncclSum, c, stream(stub_cuda::kSlowStream)));
    usleep(3000);
  }
  usleep(300000);
  return 0;
}

// The communicator calls besides InitRank/Split/Destroy, one after the other.
int scenario_lifecycle() {
  ncclComm_t all[2];
  int devs[2] = {0, 1};
  CHECK(ncclCommInitAll(all, 2, devs));
  ncclUniqueId ids[2];
  memset(ids, 6, sizeof ids);
  ncclComm_t scal = nullptr;
  CHECK(ncclCommInitRankScalable(&scal, 4, 1, 2, ids, nullptr));
  int excluded[1] = {3};
  ncclComm_t shrunk = nullptr;
  CHECK(ncclCommShrink(scal, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_DEFAULT));
  void* handle = nullptr;
  CHECK(ncclCommRegister(scal, buf, sizeof buf, &handle));
  CHECK(ncclCommDeregister(scal, handle));
  ncclResult_t async = ncclSuccess;
  CHECK(ncclCommGetAsyncError(scal, &async));  // no error: not recorded
  ncclUniqueId id3;
  memset(&id3, 8, sizeof id3);
  ncclComm_t three = nullptr;
  CHECK(ncclCommInitRank(&three, 3, id3, 0));
  CHECK(ncclCommGetAsyncError(three, &async));  // ncclRemoteError: recorded
  CHECK(ncclCommFinalize(all[0]));
  CHECK(ncclCommDestroy(all[0]));
  CHECK(ncclCommRevoke(all[1], 0));
  return 0;
}

int scenario_null_comm() {
  for (int i = 0; i < 3; i++)
    if (ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, nullptr, stream()) == ncclSuccess) return 3;
  return 0;
}

// A handler installed before the first NCCL call (as Python installs its SIGINT handler): the
// recorder must chain to it, and the program then exits normally.
volatile sig_atomic_t g_interrupted = 0;
void on_sigint(int) {
  g_interrupted = 1;
  const char msg[] = "app handler ran\n";
  ssize_t ignored = write(1, msg, sizeof msg - 1);
  (void)ignored;
}
int scenario_own_sigint_handler() {
  signal(SIGINT, on_sigint);
  ncclComm_t c = init_comm();
  for (int i = 0; i < 10; i++) probe_issue_all_reduce(c, size_t(i));
  printf("ready\n");
  fflush(stdout);
  for (int i = 0; i < 3000 && !g_interrupted; i++) usleep(10000);
  return g_interrupted ? 0 : 9;
}

// ops, then ncclCommAbort, then SIGKILL at once: only the flush inside the abort hook can have
// put the last rows on disk (the writer's own timer runs every 50 ms).
int scenario_abort_then_kill() {
  ncclComm_t c = init_comm();
  for (int i = 0; i < 50; i++) probe_issue_all_reduce(c, size_t(i));
  CHECK(ncclCommAbort(c));
  raise(SIGKILL);
  return 0;
}

// As many ops as possible, as fast as possible: the writer falls behind, the bounded queue
// refuses records, and every refused record must be counted.
int scenario_flood(int n) {
  ncclComm_t c = init_comm();
  for (int i = 0; i < n; i++) CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, stream()));
  return 0;
}

// The trace file cannot grow past a few hundred KiB (RLIMIT_FSIZE, as on a full disk).
int scenario_disk_full(int n) {
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl = {256 << 10, 256 << 10};
  setrlimit(RLIMIT_FSIZE, &rl);
  ncclComm_t c = init_comm();
  for (int i = 0; i < n; i++) {
    CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, stream()));
    if (i % 1000 == 0) usleep(60000);  // several commits, so some fit before the limit
  }
  printf("all %d ops returned ncclSuccess\n", n);
  return 0;
}
}

// Two callers that reach ncclAllReduce through the same function, with the same frame sizes:
// the hook sees the same return address and the same stack depth from both, so only the
// frames above tell them apart (the memoized native frames must not, stack_capture.cpp).
extern "C" {
__attribute__((noinline)) void probe_memo_caller_a(ncclComm_t c, size_t n) {
  probe_issue_all_reduce(c, n);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void probe_memo_caller_b(ncclComm_t c, size_t n) {
  probe_issue_all_reduce(c, n);
  asm volatile("" ::: "memory");
}
}
int scenario_memo_callers() {
  ncclComm_t c = init_comm();
  // Alternating, then in runs of 100 (one call site: one stack per caller): every memo entry
  // is made by one caller and then asked by the other.
  for (int i = 0; i < 600; i++) {
    const bool b = i < 200 ? i % 2 : i / 100 % 2;
    void (*volatile caller)(ncclComm_t, size_t) = b ? probe_memo_caller_b : probe_memo_caller_a;
    caller(c, b ? 2 : 1);
  }
  ncclCommDestroy(c);
  return 0;
}

// A daemon's descriptor hygiene: every descriptor from 3 up closed, then the program's own files
// and a pipe, which get the recorder's old numbers (its trace file, journal, wake and ack pipes).
// The program's bytes must be its own: its files hold exactly "data\n", its pipe gives back what
// it wrote, and NCCL calls after the close still run. "term": ends by raising SIGTERM (the
// recorder's signal flush); else returns 0. Prints "pipe ok" when the pipe's bytes came back.
int scenario_close_all_fds(const char* dir, bool term) {
  ncclComm_t c = init_comm();
  for (int i = 0; i < 20; i++) probe_issue_all_reduce(c, size_t(i));
  usleep(200 * 1000);  // the writer has committed and waits on its pipe
  for (int fd = 3; fd < 1024; fd++) close(fd);
  std::vector<int> files;
  for (int i = 0; i < 6; i++) {
    const std::string path = std::string(dir) + "/f" + std::to_string(i);
    const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0 || write(fd, "data\n", 5) != 5) return 3;
    files.push_back(fd);
  }
  int p[2];
  if (pipe(p) != 0) return 4;
  const char msg[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  if (write(p[1], msg, 36) != 36) return 5;
  char back[36];
  size_t got = 0;
  while (got < sizeof back) {  // blocking: a recorder that drains the pipe hangs the program here
    const ssize_t n = read(p[0], back + got, sizeof back - got);
    if (n <= 0) return 6;
    got += size_t(n);
  }
  if (memcmp(back, msg, 36) == 0) printf("pipe ok\n");
  fflush(stdout);
  for (int i = 0; i < 50; i++) probe_issue_all_reduce(c, size_t(i));
  usleep(200 * 1000);  // a few writer rounds with the program's files under the trace's numbers
  if (term) raise(SIGTERM);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: recorder_probe SCENARIO\n");
    return 1;
  }
  std::string s = argv[1];
  if (s == "basic") return scenario_basic();
  if (s == "memo_callers") return scenario_memo_callers();
  if (s == "groups") return scenario_groups();
  if (s == "errors") return scenario_errors();
  if (s == "split") return scenario_split();
  if (s == "config_name") return scenario_config_name();
  if (s == "threads") return scenario_threads();
  if (s == "fork") return scenario_fork();
  if (s == "fork_busy") return scenario_fork_busy(argc > 2 ? atoi(argv[2]) : 40);
  if (s == "hang") return scenario_hang();
  if (s == "ops_then_wait") return scenario_ops_then_wait(argc > 2 ? atoi(argv[2]) : 100);
  if (s == "graph") return scenario_graph();
  if (s == "nothing") return scenario_nothing();
  if (s == "event_records") return scenario_event_records();
  if (s == "graph_handle_reuse") return scenario_graph_handle_reuse();
  if (s == "nonblocking") return scenario_nonblocking();
  if (s == "slow_stream") return scenario_slow_stream();
  if (s == "lifecycle") return scenario_lifecycle();
  if (s == "null_comm") return scenario_null_comm();
  if (s == "own_sigint_handler") return scenario_own_sigint_handler();
  if (s == "abort_then_kill") return scenario_abort_then_kill();
  if (s == "flood") return scenario_flood(argc > 2 ? atoi(argv[2]) : 1000000);
  if (s == "close_all_fds") return scenario_close_all_fds(argc > 2 ? argv[2] : ".", argc > 3 && std::string(argv[3]) == "term");
  if (s == "disk_full") return scenario_disk_full(argc > 2 ? atoi(argv[2]) : 50000);
  fprintf(stderr, "recorder_probe: unknown scenario %s\n", s.c_str());
  return 1;
}
