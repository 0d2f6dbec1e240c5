// Host cost of one small NCCL call on a real GPU, with and without the recorder
// (LD_PRELOAD=liblockstep.so). World size 1, driver API + NCCL, no PyTorch: the noise of a
// Python framework (tens of µs per call, ±5 µs between processes) hides sub-µs costs.
//
//   nccl_call_overhead [--calls=20000] [--rounds=15] [--pause-ms=50] [--mode=plain|parts|profile|primitives|runtime]
//                      [--op=allreduce|sendrecv]
//
// --op=sendrecv: every "call" is one group of ncclSend + ncclRecv to self (8 bytes), as
// pipeline parallelism issues them; ns per group.
//
// After every timed batch the program sleeps --pause-ms (untimed), so that the recorder's writer
// thread drains the batch's rows: the timed calls are the steady state of a job that issues
// collectives at up to ~1/3 of this loop's rate, not a writer saturated at 1 M rows/s.
// plain:      ncclAllReduce(8 bytes) issued back to back on one stream, then one
//             cuStreamSynchronize; ns per call over `rounds` timed batches. One JSON line.
// parts:      under the recorder only (needs lockstep_bench_set_off, bench_knobs.h): the same
//             batch with each hot-path part switched off in turn, configurations alternating
//             within every round. One JSON line per configuration ("full", "-stack", ...,
//             "hooks only"); a part's cost is full minus "-part".
// profile:    under the recorder only: as plain, the profile counters on over every timed batch
//             (one "profile-plain" line: ns per call per part), with the LOCKSTEP_BENCH_OFF the
//             process started with (e.g. "donerows": one configuration per process).
// primitives: without the recorder: ncclAllReduce followed by one driver call the recorder
//             makes per op (cuEventRecord of a pooled event, cuStreamGetCaptureInfo,
//             cuCtxGetCurrent, cuStreamWriteValue32/64 to pinned host memory with and without
//             the memory barrier, or to device memory), and clock reads,
//             alternating within every round; the marginal cost of each on the real issue path.
// runtime:    the CUDA runtime calls PyTorch makes around each collective (cudaEventRecord,
//             cudaStreamWaitEvent; libcudart dlopened from $CUDART or libcudart.so.13) through
//             the recorder's hooks: recorded vs forwarded only (kOffWaits), alternating; without
//             the recorder, the real calls alone. ns per runtime call.
// Every line gives the median over rounds and min/max; LOCKSTEP_STACKS labels the recorder runs.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    auto r_ = (x);                                                                 \
    if (r_ != 0) { std::fprintf(stderr, "%s failed: %d\n", #x, (int)r_); return 1; } \
  } while (0)

namespace {

// Mirrors interposer/bench_knobs.h.
const struct { const char* name; unsigned bit; } kParts[] = {
    {"stack", 1u << 1},  {"capture", 1u << 2}, {"clock", 1u << 3},    {"event", 1u << 4},
    {"queue", 1u << 5},  {"watchdog", 1u << 6}, {"memop", 1u << 8}, {"covering", 1u << 14},
    {"eager", 1u << 16}, {"donerows", 1u << 17}};
constexpr unsigned kOffRecorder = 1u << 0;

const char* g_op = "allreduce";  // --op, for the JSON lines

// ns: per call until the stream drained (what the tables report); issue_ns: per call until
// the last call returned, before the synchronize (host cost alone, while the GPU keeps up).
struct Series {
  std::vector<double> ns, issue_ns;
  void add(std::pair<double, double> t) {
    ns.push_back(t.first);
    issue_ns.push_back(t.second);
  }
  void print(const char* mode, const std::string& label, const char* stacks, int calls) {
    std::sort(ns.begin(), ns.end());
    std::sort(issue_ns.begin(), issue_ns.end());
    std::printf("{\"op\": \"%s\", \"mode\": \"%s\", \"label\": \"%s\", \"stacks\": \"%s\", \"median_ns\": %.1f, "
                "\"min_ns\": %.1f, \"max_ns\": %.1f, \"issue_median_ns\": %.1f, \"calls\": %d, "
                "\"rounds\": %zu}\n",
                g_op, mode, label.c_str(), stacks, ns[ns.size() / 2], ns.front(), ns.back(),
                issue_ns[issue_ns.size() / 2], calls, ns.size());
  }
};

int g_pause_ms = 50;
std::chrono::steady_clock::time_point g_issued;

// Every timed batch ends with this: notes when issuing ended, then waits for the stream.
void drain(CUstream s) {
  g_issued = std::chrono::steady_clock::now();
  cuStreamSynchronize(s);
}

std::pair<double, double> time_ns(int calls, const std::function<void()>& batch) {
  auto t0 = std::chrono::steady_clock::now();
  batch();
  auto t1 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(g_pause_ms));
  return {std::chrono::duration<double, std::nano>(t1 - t0).count() / calls,
          std::chrono::duration<double, std::nano>(g_issued - t0).count() / calls};
}

const char* sendrecv_name(const std::string& op) { return op == "sendrecv" ? "sendrecv" : "allreduce"; }

}  // namespace

int main(int argc, char** argv) {
  int calls = 20000, rounds = 15;
  std::string mode = "plain";
  std::string op = "allreduce";
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--calls=", 8)) calls = std::atoi(argv[i] + 8);
    else if (!strncmp(argv[i], "--rounds=", 9)) rounds = std::atoi(argv[i] + 9);
    else if (!strncmp(argv[i], "--mode=", 7)) mode = argv[i] + 7;
    else if (!strncmp(argv[i], "--pause-ms=", 11)) g_pause_ms = std::atoi(argv[i] + 11);
    else if (!strncmp(argv[i], "--op=", 5)) op = argv[i] + 5;
    else if (i == 1) calls = std::atoi(argv[i]);  // old form: calls [repeats]
    else if (i == 2) rounds = std::atoi(argv[i]);
  }
  if (calls <= 0 || rounds <= 0) return 2;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUdeviceptr buf;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAlloc(&buf, 64));
  ncclUniqueId id;
  ncclComm_t comm;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclCommInitRank(&comm, 1, id, 0));
  if (op != "allreduce" && op != "sendrecv") return 2;
  g_op = sendrecv_name(op);
  const bool sendrecv = op == "sendrecv";
  auto issue = [&] {
    if (sendrecv) {
      ncclGroupStart();
      ncclSend((void*)buf, 2, ncclFloat32, 0, comm, (cudaStream_t)stream);
      ncclRecv((void*)(buf + 32), 2, ncclFloat32, 0, comm, (cudaStream_t)stream);
      ncclGroupEnd();
    } else {
      ncclAllReduce((void*)buf, (void*)buf, 2, ncclFloat32, ncclSum, comm, (cudaStream_t)stream);
    }
  };
  auto batch = [&](int n) {
    for (int i = 0; i < n; ++i) issue();
    drain(stream);
  };
  batch(2000);  // warm-up
  const char* preload = std::getenv("LD_PRELOAD");
  bool recorded = preload && *preload;
  const char* stacks = std::getenv("LOCKSTEP_STACKS");
  if (!stacks) stacks = recorded ? "default" : "";

  // One JSON line of the recorder's profile counters (bench_knobs.h, kProfile must be on):
  // TSC ticks per part over run(), per call. Nothing without the recorder's counters.
  auto profile_line = [&](const char* mode_name, const std::function<void()>& settle,
                          const std::function<void()>& run, int ncalls) {
    using Counters = unsigned (*)(uint64_t*, unsigned);
    auto counters = reinterpret_cast<Counters>(dlsym(RTLD_DEFAULT, "lockstep_bench_counters"));
    if (!counters) {
      run();
      return;
    }
    const char* names[] = {"ops", "op_begin", "op_end", "stack_captures", "unwind", "unwind_frames",
                           "python", "python_frames", "submit", "submits", "waits",
                           "wait_rows", "completion", "event_record", "capture", "row_push"};
    // The library says how many counters it keeps (an older one keeps fewer: those read 0);
    // the TSC follows them.
    const unsigned kN = std::min<unsigned>(counters(nullptr, 0), sizeof names / sizeof *names);
    uint64_t a[sizeof names / sizeof *names + 1] = {}, b[sizeof names / sizeof *names + 1] = {};
    settle();
    counters(a, kN + 1);
    auto t0 = std::chrono::steady_clock::now();
    run();
    counters(b, kN + 1);
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    double ghz = double(b[kN] - a[kN]) / ns;
    const char* off = std::getenv("LOCKSTEP_BENCH_OFF");
    std::printf("{\"mode\": \"%s\", \"stacks\": \"%s\", \"bench_off\": \"%s\", \"calls\": %d, \"tsc_ghz\": %.3f",
                mode_name, stacks, off ? off : "", ncalls, ghz);
    for (unsigned i = 0; i < kN; ++i) {
      bool ticks = !strstr(names[i], "frames") && i != 0 && i != 3 && i != 9 && i != 10;
      std::printf(", \"%s%s\": %.1f", names[i], ticks ? "_ns" : "",
                  ticks ? double(b[i] - a[i]) / ghz / ncalls : double(b[i] - a[i]) / ncalls);
    }
    std::printf("}\n");
  };

  if (mode == "plain") {
    Series s;
    for (int r = 0; r < rounds; ++r) s.add(time_ns(calls, [&] { batch(calls); }));
    s.print("plain", recorded ? stacks : "baseline", stacks, calls);
  } else if (mode == "parts") {
    using SetOff = unsigned (*)(unsigned);
    auto set_off = reinterpret_cast<SetOff>(dlsym(RTLD_DEFAULT, "lockstep_bench_set_off"));
    if (!set_off) {
      std::fprintf(stderr, "--mode=parts needs LD_PRELOAD=liblockstep.so with bench knobs\n");
      return 2;
    }
    std::vector<std::pair<std::string, unsigned>> configs = {{"full", 0}};
    for (const auto& p : kParts) configs.push_back({std::string("-") + p.name, p.bit});
    configs.push_back({"hooks only", kOffRecorder});
    std::map<std::string, Series> series;
    for (int r = 0; r < rounds; ++r)
      for (size_t k = 0; k < configs.size(); ++k) {
        const auto& [label, mask] = configs[(k + r) % configs.size()];  // rotate the order
        set_off(mask);
        batch(500);  // settle (the watchdog catches up with the previous configuration)
        series[label].add(time_ns(calls, [&] { batch(calls); }));
      }
    set_off(0);
    for (auto& [label, mask] : configs) series[label].print("parts", label, stacks, calls);
    // The recorder's own counters (bench_knobs.h, kProfile): TSC ticks per part, per call.
    set_off(1u << 12);
    profile_line("profile", [&] { batch(500); }, [&] { batch(calls); }, calls);
    set_off(0);
  } else if (mode == "profile") {
    // Under the recorder: as plain, with the profile counters on over every timed batch, and
    // whatever LOCKSTEP_BENCH_OFF the process started with (one configuration per process).
    auto set_off = reinterpret_cast<unsigned (*)(unsigned)>(dlsym(RTLD_DEFAULT, "lockstep_bench_set_off"));
    if (!set_off) {
      std::fprintf(stderr, "--mode=profile needs LD_PRELOAD=liblockstep.so with bench knobs\n");
      return 2;
    }
    const unsigned start_mask = set_off(0);
    set_off(start_mask | 1u << 12);
    Series s;
    profile_line("profile-plain", [] {}, [&] {
      for (int r = 0; r < rounds; ++r) s.add(time_ns(calls, [&] { batch(calls); }));
    }, calls * rounds);
    s.print("plain", stacks, stacks, calls);
    set_off(start_mask);
  } else if (mode == "primitives") {
    void* host = nullptr;
    CHECK(cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CUdeviceptr host_dev;
    CHECK(cuMemHostGetDevicePointer(&host_dev, host, 0));
    std::vector<CUevent> events(4096);
    for (auto& e : events) CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    size_t next_ev = 0;
    unsigned value = 0;
    auto clock_read = [](clockid_t c) {
      timespec ts;
      clock_gettime(c, &ts);
      return ts.tv_nsec;
    };
    volatile long sink = 0;
    std::vector<std::pair<std::string, std::function<void()>>> steps = {
        {"allreduce", [&] { issue(); }},
        {"allreduce+cuEventRecord", [&] { issue(); cuEventRecord(events[next_ev++ & 4095], stream); }},
        {"allreduce+cuStreamGetCaptureInfo", [&] {
           issue();
           CUstreamCaptureStatus st;
           cuStreamGetCaptureInfo(stream, &st, nullptr, nullptr, nullptr, nullptr, nullptr);
         }},
        {"allreduce+cuCtxGetCurrent", [&] { issue(); CUcontext c; cuCtxGetCurrent(&c); }},
        {"allreduce+cuStreamWriteValue32", [&] {
           issue();
           cuStreamWriteValue32(stream, host_dev, ++value, CU_STREAM_WRITE_VALUE_DEFAULT);
         }},
        {"allreduce+cuStreamWriteValue32 no barrier", [&] {
           issue();
           cuStreamWriteValue32(stream, host_dev + 64, ++value, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
         }},
        {"allreduce+cuStreamWriteValue64 no barrier", [&] {
           issue();
           cuStreamWriteValue64(stream, host_dev + 128, ++value, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
         }},
        {"allreduce+cuStreamWriteValue64 to device memory", [&] {
           issue();
           cuStreamWriteValue64(stream, buf + 32, ++value, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
         }},
        {"allreduce+2 clock reads", [&] { issue(); sink = sink + clock_read(CLOCK_MONOTONIC) + clock_read(CLOCK_REALTIME); }},
        {"clock_gettime(MONOTONIC)", [&] { sink = sink + clock_read(CLOCK_MONOTONIC); }},
        {"clock_gettime(REALTIME)", [&] { sink = sink + clock_read(CLOCK_REALTIME); }},
    };
    std::map<std::string, Series> series;
    for (int r = 0; r < rounds; ++r)
      for (size_t k = 0; k < steps.size(); ++k) {
        auto& [label, fn] = steps[(k + r) % steps.size()];
        series[label].add(time_ns(calls, [&] {
          for (int i = 0; i < calls; ++i) fn();
          drain(stream);
        }));
      }
    for (auto& [label, fn] : steps) series[label].print("primitives", label, "", calls);
  } else if (mode == "runtime") {
    const char* cudart = std::getenv("CUDART");
    void* rt = dlopen(cudart && *cudart ? cudart : "libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!rt) {
      std::fprintf(stderr, "cannot load libcudart: %s\n", dlerror());
      return 1;
    }
    using Create = int (*)(void**, unsigned);
    using Record = int (*)(void*, void*);
    using Wait = int (*)(void*, void*, unsigned);
    auto create = reinterpret_cast<Create>(dlsym(rt, "cudaEventCreateWithFlags"));
    // The global scope: the recorder's hooks when it is preloaded.
    auto record = reinterpret_cast<Record>(dlsym(RTLD_DEFAULT, "cudaEventRecord"));
    auto wait = reinterpret_cast<Wait>(dlsym(RTLD_DEFAULT, "cudaStreamWaitEvent"));
    void* ev = nullptr;
    if (!create || !record || !wait || create(&ev, 0x2 /* cudaEventDisableTiming */) != 0) {
      std::fprintf(stderr, "libcudart entry points missing\n");
      return 1;
    }
    using SetOff = unsigned (*)(unsigned);
    auto set_off = reinterpret_cast<SetOff>(dlsym(RTLD_DEFAULT, "lockstep_bench_set_off"));
    std::vector<std::pair<std::string, unsigned>> configs = {{"runtime calls", 0}};
    if (set_off) configs = {{"runtime calls recorded", 0}, {"runtime calls forwarded", 1u << 7}};
    std::map<std::string, Series> series;
    for (int r = 0; r < rounds; ++r)
      for (size_t k = 0; k < configs.size(); ++k) {
        const auto& [label, mask] = configs[(k + r) % configs.size()];
        if (set_off) set_off(mask);
        series[label].add(time_ns(calls, [&] {
          for (int i = 0; i < calls / 2; ++i) {
            record(ev, (void*)stream);
            wait((void*)stream, ev, 0);
          }
          drain(stream);
        }));
      }
    if (set_off) set_off(0);
    for (auto& [label, mask] : configs)
      series[label].print("runtime", label, recorded ? stacks : "baseline", calls);
  } else {
    std::fprintf(stderr, "unknown --mode=%s\n", mode.c_str());
    return 2;
  }
  ncclCommDestroy(comm);
  return 0;
}
