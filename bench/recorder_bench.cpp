// Per-call cost of the recorder over a backend that does nothing (tests/recorder/stub_nccl.cpp):
// this executable links liblockstep.so before the stub libnccl.so.2, so ncclX resolves to the
// hooks exactly as under LD_PRELOAD. Timings only (docs/recorder.md has the figures).
//   recorder_bench [--stacks=none|native] [benchmark flags]
//   recorder_bench [--stacks=...] --parts [--rounds=15]
// --parts: the hot path with each part switched off in turn (interposer/bench_knobs.h),
// configurations alternating within every round; prints ns per ncclAllReduce, median of rounds
// ("-stackmemo": every native stack unwound, none taken from the memo).
// With LD_LIBRARY_PATH=<build>/tests/recorder/stub-lib the stub libcuda.so.1 is found and
// completion tracking (context query, event record, watchdog) runs too; without it, it is off.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>
#include <thread>

namespace {

ncclComm_t g_comm = nullptr;
float g_buf[64];
cudaStream_t kStream = reinterpret_cast<cudaStream_t>(0x5000);
std::string g_dir;

// The writer commits every ~50 ms; the queue holds 65,536 records. Pausing every 16,384 calls
// lets it drain, so the timed calls are the steady-state path (push), never the drop path.
constexpr int64_t kBurst = 16384;
void let_writer_drain(benchmark::State& state) {
  state.PauseTiming();
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  state.ResumeTiming();
}

void BM_all_reduce_without_recorder(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(pncclAllReduce(g_buf, g_buf, 16, ncclFloat32, ncclSum, g_comm, kStream));
}
BENCHMARK(BM_all_reduce_without_recorder);

void BM_all_reduce_recorded(benchmark::State& state) {
  int64_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ncclAllReduce(g_buf, g_buf, 16, ncclFloat32, ncclSum, g_comm, kStream));
    if (++n % kBurst == 0) let_writer_drain(state);
  }
}
BENCHMARK(BM_all_reduce_recorded)->Iterations(1 << 18);

// One logical all_to_all over 8 peers: 16 calls folded into one ops row and 16 op_parts rows.
void BM_grouped_all_to_all_8_peers_recorded(benchmark::State& state) {
  int64_t n = 0;
  for (auto _ : state) {
    ncclGroupStart();
    for (int p = 0; p < 8; p++) {
      ncclSend(g_buf, 4, ncclFloat32, p, g_comm, kStream);
      ncclRecv(g_buf, 4, ncclFloat32, p, g_comm, kStream);
    }
    ncclGroupEnd();
    if (++n % (kBurst / 16) == 0) let_writer_drain(state);
  }
}
BENCHMARK(BM_grouped_all_to_all_8_peers_recorded)->Iterations(1 << 15);

// A pipeline-parallel exchange: one group of a send and a recv (one ops row, two parts).
void BM_grouped_send_recv_recorded(benchmark::State& state) {
  int64_t n = 0;
  for (auto _ : state) {
    ncclGroupStart();
    ncclSend(g_buf, 4, ncclFloat32, 1, g_comm, kStream);
    ncclRecv(g_buf, 4, ncclFloat32, 1, g_comm, kStream);
    ncclGroupEnd();
    if (++n % (kBurst / 2) == 0) let_writer_drain(state);
  }
}
BENCHMARK(BM_grouped_send_recv_recorded)->Iterations(1 << 17);

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

void report_trace() {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // last commit
  std::string path = g_dir + "/";
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  path += std::string(host) + "-" + std::to_string(getpid()) + ".lockstep.sqlite";
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return;
  auto q = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    std::string v = "?";
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return v;
  };
  printf("trace: %s ops rows, %s stacks, dropped_records=%s, stack_mode=%s (%s)\n",
         q("SELECT count(*) FROM ops").c_str(), q("SELECT count(*) FROM stacks").c_str(),
         q("SELECT value FROM meta WHERE key='dropped_records'").c_str(),
         q("SELECT value FROM meta WHERE key='stack_mode'").c_str(), path.c_str());
  sqlite3_close(db);
}

extern "C" unsigned lockstep_bench_set_off(unsigned mask);

// Alternating rounds of every configuration (bench_knobs.h bits); one line per configuration.
void run_parts(int rounds) {
  const std::vector<std::pair<std::string, unsigned>> configs = {
      {"full", 0},          {"-stack", 1u << 1}, {"-capture", 1u << 2}, {"-clock", 1u << 3},
      {"-event", 1u << 4},  {"-queue", 1u << 5}, {"-watchdog", 1u << 6},
      {"-stackmemo", 1u << 21}, {"hooks only", 1u << 0}};
  constexpr int kCalls = 8192;  // half the writer's drain budget per pause (see kBurst)
  std::map<std::string, std::vector<double>> ns;
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < configs.size(); ++k) {
      const auto& [label, mask] = configs[(k + r) % configs.size()];
      lockstep_bench_set_off(mask);
      std::this_thread::sleep_for(std::chrono::milliseconds(120));  // the writer drains
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i)
        ncclAllReduce(g_buf, g_buf, 16, ncclFloat32, ncclSum, g_comm, kStream);
      auto t1 = std::chrono::steady_clock::now();
      ns[label].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kCalls);
    }
  // The CUDA runtime calls PyTorch makes around each collective, through the hooks: recorded
  // (a `waits` row each) vs forwarded only (kOffWaits), alternating.
  std::map<std::string, std::vector<double>> rt;
  auto event = reinterpret_cast<cudaEvent_t>(0x7000);
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      bool off = (k + r) % 2;
      lockstep_bench_set_off(off ? 1u << 7 : 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(120));
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls / 2; ++i) {
        cudaEventRecord(event, kStream);
        cudaStreamWaitEvent(kStream, event, 0);
      }
      auto t1 = std::chrono::steady_clock::now();
      rt[off ? "forwarded" : "recorded"].push_back(
          std::chrono::duration<double, std::nano>(t1 - t0).count() / kCalls);
    }
  // PyTorch's pattern: each collective followed by its work's end event on the op's stream
  // (events reused only after they completed and the recorder's watchdog had time to see it, as
  // PyTorch's event cache hands them out again after its watchdog saw the work complete). "adopted": the end event is the op's completion signal (the
  // default); "own event": ours recorded after every op as well (kOffAdopt). The stub driver
  // reads zeroed memory as a completed event, and its record costs next to nothing: what
  // differs here is the recorder's own work (on a GPU the record saved is ~1 us, docs).
  alignas(16) static int64_t end_events[kCalls / 2][2] = {};
  std::map<std::string, std::vector<double>> adopt;
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      bool own = (k + r) % 2;
      lockstep_bench_set_off(own ? 1u << 23 : 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(120));
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls / 2; ++i) {
        ncclAllReduce(g_buf, g_buf, 16, ncclFloat32, ncclSum, g_comm, kStream);
        cudaEventRecord(reinterpret_cast<cudaEvent_t>(end_events[i]), kStream);
      }
      auto t1 = std::chrono::steady_clock::now();
      adopt[own ? "own event" : "adopted"].push_back(
          std::chrono::duration<double, std::nano>(t1 - t0).count() / (kCalls / 2));
    }
  lockstep_bench_set_off(0);
  for (auto& [label, v] : adopt) {
    std::sort(v.begin(), v.end());
    printf("ncclAllReduce + end event cudaEventRecord, %-9s median %6.1f ns  min %6.1f\n",
           label.c_str(), v[v.size() / 2], v.front());
  }
  for (auto& [label, v] : rt) {
    std::sort(v.begin(), v.end());
    printf("runtime call (cudaEventRecord / cudaStreamWaitEvent) %-9s median %6.1f ns  min %6.1f\n",
           label.c_str(), v[v.size() / 2], v.front());
  }
  double full = 0;
  for (const auto& [label, mask] : configs) {
    auto v = ns[label];
    std::sort(v.begin(), v.end());
    double med = v[v.size() / 2];
    if (label == "full") full = med;
    printf("%-12s median %7.1f ns  min %7.1f  max %7.1f  part = full - this: %+7.1f ns\n",
           label.c_str(), med, v.front(), v.back(), full - med);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* stacks = "none";
  int parts_rounds = 0;
  for (int i = 1; i < argc;) {
    if (strncmp(argv[i], "--stacks=", 9) == 0) stacks = argv[i] + 9;
    else if (strcmp(argv[i], "--parts") == 0) parts_rounds = parts_rounds ? parts_rounds : 15;
    else if (strncmp(argv[i], "--rounds=", 9) == 0) parts_rounds = atoi(argv[i] + 9);
    else {
      i++;
      continue;
    }
    for (int j = i; j < argc - 1; j++) argv[j] = argv[j + 1];
    argc--;
  }
  setenv("LOCKSTEP_STACKS", stacks, 1);
  char tmpl[] = "/tmp/lockstep-bench-XXXXXX";
  bool own_dir = !getenv("LOCKSTEP_DIR");
  g_dir = own_dir ? mkdtemp(tmpl) : getenv("LOCKSTEP_DIR");
  setenv("LOCKSTEP_DIR", g_dir.c_str(), 1);

  // The trace holds millions of rows: do not leave it behind. Removed by an exit handler
  // registered before the recorder starts (so it runs after the recorder's own, which makes the
  // final commit): removing it from main() made that commit fail on an unlinked file
  // (SQLITE_READONLY_DBMOVED), and the recorder said "recording stopped (read_only ...)".
  if (own_dir) atexit([] {
    std::string cmd = "rm -rf '" + g_dir + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "recorder_bench: could not remove %s\n", g_dir.c_str());
  });
  long rss_before = rss_kib();
  ncclUniqueId id;
  memset(&id, 1, sizeof id);
  if (ncclCommInitRank(&g_comm, 8, id, 0) != ncclSuccess) {
    fprintf(stderr, "recorder_bench: ncclCommInitRank failed\n");
    return 1;
  }
  printf("stacks=%s\n", stacks);
  if (parts_rounds > 0) {
    run_parts(parts_rounds);
  } else {
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  printf("recorder memory: RSS %.1f MiB before the first NCCL call, %.1f MiB after the runs\n",
         rss_before / 1024.0, rss_kib() / 1024.0);
  report_trace();
  return 0;
}
