// Throughput of the recorder's writer thread: records pushed into its queue and committed to
// SQLite, measured from the first push to the end of the flush that commits them; and the bytes
// on disk per op. Timings only (docs/recorder.md, docs/schema.md).
//
// BM_writer_capped: the same with completions, through a writer whose size cap (16 MiB) was
// reached before timing starts, so every batch pays for retirement; side by side with the
// uncapped one in one run.
//
// LOCKSTEP_BENCH_CAPPED_OPS=N (with LOCKSTEP_MAX_MB=M, default 64): instead, N ops with their
// completions through one writer capped at M MiB; prints the file's size along the way.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sqlite3.h>

#include "process_info.h"
#include "writer.h"

using namespace lockstep::rec;

namespace {

std::string g_dir;

// A started writer on a fresh directory (dir receives its path); exits when it cannot open.
Writer* start_writer(const char* prefix, int64_t max_mb, std::string& dir) {
  std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
  TraceHeader h;
  h.info = read_process_info();
  h.info.trace_dir = dir = mkdtemp(tmpl.data());
  h.max_mb = max_mb;
  std::string err;
  Writer* w = Writer::open(h, &err);
  if (!w) {
    fprintf(stderr, "recorder_writer_bench: %s\n", err.c_str());
    exit(1);
  }
  w->start();
  return w;
}

Writer* open_writer() {
  // The throughput of the writer itself, no cap.
  static Writer* w = start_writer("lockstep-writer-bench", 0, g_dir);
  return w;
}

int64_t g_call = 1;

// CPU seconds (user + system) of the writer thread so far: on a shared machine the wall-clock
// rate depends on the other load; ops per writer CPU-second is what one core sustains.
double writer_cpu_seconds() {
  double total = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "lockstep-writer") continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream in(line.substr(line.rfind(')') + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && in >> field; i++) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    total += double(utime + stime) / double(sysconf(_SC_CLK_TCK));
  }
  return total;
}

Record op_record(int64_t call) {
  Record r;
  r.kind = RecKind::Op;
  r.op = {};
  r.op.call_index = call;
  r.op.comm_id = 1;
  r.op.seq = call;
  r.op.count = 1024;
  r.op.group_id = -1;
  r.op.issue_mono = call * 1000;
  r.op.issue_wall = call * 1000;
  r.op.return_mono = call * 1000 + 200;
  r.op.stream = 0x5000;
  r.op.origin_call = -1;
  static const int tid = getpid();
  r.op.tid = tid;
  r.op.root = r.op.peer = -1;
  r.op.redop = 0;
  r.op.dtype = 7;
  r.op.op = OpKind::AllReduce;
  r.op.state = OpState::Enqueued;
  return r;
}

// Pushes `batch` ops (with their completions when asked) and waits until they are committed.
void push_batch(Writer* w, int64_t batch, bool completions, int64_t& next_call) {
  for (int64_t i = 0; i < batch; i++) {
    int64_t call = next_call++;
    w->push(op_record(call));
    if (completions) {
      Record c;
      c.kind = RecKind::Completion;
      c.done = {call, call * 1000 + 5000};
      w->push(c);
    }
    // Keep within the queue: the writer drains concurrently, but never count on it.
    if (completions && i == 30000) w->flush(60000);
  }
  w->flush(60000);
}

// Batches of 50,000 ops (fits the 65,536-record queue), each with its completion row when
// range(0) is 1: what a traced training loop produces.
void time_batches(benchmark::State& state, Writer* w, bool completions, int64_t& next_call) {
  const int64_t batch = 50000;
  int64_t rows = 0;
  const double cpu0 = writer_cpu_seconds();
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    push_batch(w, batch, completions, next_call);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    rows += completions ? 2 * batch : batch;
  }
  state.counters["ops/s"] = benchmark::Counter(double(batch) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["ops/writer_cpu_s"] = double(batch) * double(state.iterations()) / (writer_cpu_seconds() - cpu0);
  state.counters["rows/s"] = benchmark::Counter(double(rows), benchmark::Counter::kIsRate);
}

void BM_writer_commits(benchmark::State& state) {
  Writer* w = open_writer();
  time_batches(state, w, state.range(0) == 1, g_call);
  // Bytes on disk per op so far (this writer's file holds every op of both runs).
  struct stat st {};
  if (stat(w->path().c_str(), &st) == 0) state.counters["file_bytes/op"] = double(st.st_size) / double(g_call - 1);
}
BENCHMARK(BM_writer_commits)->Arg(0)->Arg(1)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);

int64_t meta_int(const std::string& path, const char* key);
int64_t query_int(const std::string& path, const std::string& sql);

// The capped writer: 16 MiB, filled past its cap before the timed batches. Its thread is also
// named lockstep-writer: the uncapped writer, idle meanwhile, adds its idle wake-ups to the
// CPU time counted.
void BM_writer_capped(benchmark::State& state) {
  static std::string dir;
  static Writer* w = start_writer("lockstep-writer-bench-capped", 16, dir);
  static int64_t next_call = 1;  // its own calls: seq 1, 2, ... on its communicator
  while (meta_int(w->path(), "retired_ops") <= 0) push_batch(w, 50000, true, next_call);
  const int64_t retired0 = meta_int(w->path(), "retired_ops");
  time_batches(state, w, true, next_call);
  state.counters["retired_ops"] = double(meta_int(w->path(), "retired_ops") - retired0);
  state.counters["page_B"] = double(query_int(w->path(), "PRAGMA page_size"));
  struct stat st {};
  if (stat(w->path().c_str(), &st) == 0) state.counters["file_MiB"] = double(st.st_size) / (1 << 20);
  if (state.thread_index() == 0 && !dir.empty()) {
    w->stop("exit");
    std::string cmd = "rm -rf '" + dir + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir.c_str());
    dir.clear();
  }
}
BENCHMARK(BM_writer_capped)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);

int64_t query_int(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t v = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

int64_t meta_int(const std::string& path, const char* key) {
  return query_int(path, std::string("SELECT value FROM meta WHERE key='") + key + "'");
}

int capped_run(int64_t n) {
  const char* mb = getenv("LOCKSTEP_MAX_MB");
  const int64_t max_mb = mb && *mb ? atoll(mb) : 64;
  Writer* w = start_writer("lockstep-writer-capped", max_mb, g_dir);
  auto t0 = std::chrono::steady_clock::now();
  int64_t max_size = 0;
  for (int64_t call = 1; call <= n; call++) {
    w->push(op_record(call));
    Record c;
    c.kind = RecKind::Completion;
    c.done = {call, call * 1000 + 5000};
    w->push(c);
    if (call % 30000 == 0) {
      w->flush(60000);
      struct stat st {};
      if (stat(w->path().c_str(), &st) == 0) max_size = std::max<int64_t>(max_size, st.st_size);
      if (call % 10000000 == 0) {
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        printf("%lld ops: file %lld bytes (max so far %lld), %.0f ops/s\n", (long long)call, (long long)st.st_size,
               (long long)max_size, double(call) / s);
        fflush(stdout);
      }
    }
  }
  const double cpu = writer_cpu_seconds();
  w->stop("exit");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("writer thread CPU: %.1f s (%.0f ops per writer CPU-second)\n", cpu, double(n) / cpu);
  struct stat st {};
  stat(w->path().c_str(), &st);
  printf("capped run: %lld ops, cap %lld MiB: final file %lld bytes, largest seen %lld bytes, retired_ops %lld, "
         "dropped_records %lld, %.1f s (%.0f ops/s)\n",
         (long long)n, (long long)max_mb, (long long)st.st_size, (long long)std::max<int64_t>(max_size, st.st_size),
         (long long)meta_int(w->path(), "retired_ops"), (long long)meta_int(w->path(), "dropped_records"), s,
         double(n) / s);
  std::string cmd = "rm -rf '" + g_dir + "'";
  if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", g_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* n = getenv("LOCKSTEP_BENCH_CAPPED_OPS"); n && *n) return capped_run(atoll(n));
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!g_dir.empty()) {
    std::string cmd = "rm -rf '" + g_dir + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", g_dir.c_str());
  }
  return 0;
}
