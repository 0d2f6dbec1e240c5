// Writes the one-rank schedules of the GPU check (tests/replay/gpu/run.sh): "ok" (split, every
// collective, a grouped self send/recv, events, a graph-launched op) and "hang" (a self send
// nobody receives).
#include "model_builder.h"
#include "trace_file_model.h"
using namespace lockstep;
int main(int argc, char** argv) {
  std::string out = argv[1];
  {
    testing::RowsBuilder b(1);
    b.comm(0, "world", 1, 0);
    b.split(0, "sub", "world", 1, 0, 0, 0);
    const int64_t n = 1 << 20;
    for (int step = 0; step < 3; ++step) {
      b.op(0, "world", "all_reduce", 1, n);
      b.op(0, "world", "all_gather", 1, n);
      b.op(0, "world", "reduce_scatter", 2, n);
      b.op(0, "sub", "broadcast", 2, n).root = 0;
      b.op(0, "sub", "reduce", 1, n).root = 0;
      b.op(0, "world", "all_to_all", 1, n);
      Op& g = b.op(0, "world", "send_recv", 2, n);
      g.parts = {OpPart{lockstep::vocab::Op::Send, lockstep::vocab::Dtype::Float32, n, -1, 0, lockstep::vocab::RedOp::None}, OpPart{lockstep::vocab::Op::Recv, lockstep::vocab::Dtype::Float32, n, -1, 0, lockstep::vocab::RedOp::None}};
      b.wait(0, "event_record", 1, 0xe1);
      b.wait(0, "stream_wait_event", 2, 0xe1);
      b.op(0, "world", "all_reduce", 2, n, "bfloat16").state = lockstep::vocab::State::GraphLaunched;
      b.wait(0, "stream_sync", 2);
    }
    trace_file::write_trace_dir(b.trace, out + "/ok", trace_file::kSchedule);
  }
  {
    testing::RowsBuilder b(1);
    b.comm(0, "world", 1, 0);
    b.op(0, "world", "all_reduce", 1, 1024);
    b.send(0, "world", 0, 1);  // a send to itself that nobody receives
    trace_file::write_trace_dir(b.trace, out + "/hang", trace_file::kSchedule);
  }
}
