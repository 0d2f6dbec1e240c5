// Throughput of the recorder's writer thread: records pushed into its queue and committed to
// SQLite, measured from the first push to the end of the flush that commits them.
// Timings only (docs/recorder.md).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "process_info.h"
#include "writer.h"

using namespace lockstep::rec;

namespace {

std::string g_dir;

Writer* open_writer() {
  static Writer* w = [] {
    char tmpl[] = "/tmp/lockstep-writer-bench-XXXXXX";
    TraceHeader h;
    h.info = read_process_info();
    h.info.trace_dir = g_dir = mkdtemp(tmpl);
    std::string err;
    Writer* w = Writer::open(h, &err);
    if (!w) {
      fprintf(stderr, "recorder_writer_bench: %s\n", err.c_str());
      exit(1);
    }
    w->start();
    return w;
  }();
  return w;
}

int64_t g_call = 1;

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

// Batches of 50,000 ops (fits the 65,536-record queue), each with its completion row when
// range(0) is 1: what a traced training loop produces.
void BM_writer_commits(benchmark::State& state) {
  Writer* w = open_writer();
  const int64_t batch = 50000;
  bool completions = state.range(0) == 1;
  int64_t rows = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < batch; i++) {
      int64_t call = g_call++;
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
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    rows += completions ? 2 * batch : batch;
  }
  state.counters["ops/s"] = benchmark::Counter(double(batch) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["rows/s"] = benchmark::Counter(double(rows), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_writer_commits)->Arg(0)->Arg(1)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!g_dir.empty()) {
    std::string cmd = "rm -rf '" + g_dir + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", g_dir.c_str());
  }
  return 0;
}
