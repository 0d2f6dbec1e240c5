// Every LOCKSTEP_* environment variable, declared once: its name, and for the recorder's
// settings their default and accepted range. The recorder (interposer/config.cpp) parses them,
// `lockstep run` (cli/cmd_run.cpp), replay and the launcher set them through these names, and
// docs/recorder.md's variable table shows the same defaults (tests/schema/env_vars_doc_test.sh
// compares the two). The rank variables (LOCKSTEP_RANK and the launchers') are rank_env.h's.
#pragma once

#include <cstdint>

namespace lockstep::schema::env {

// ---- the recorder's settings (interposer/config.cpp) --------------------------------------------
inline constexpr const char* kDir = "LOCKSTEP_DIR";
inline constexpr const char* kDefaultDir = "lockstep-trace";  // relative: to the working directory

inline constexpr const char* kStacks = "LOCKSTEP_STACKS";     // none|native|python; default: python
                                                              // when CPython is in the process
inline constexpr const char* kHangTimeout = "LOCKSTEP_HANG_TIMEOUT";
inline constexpr double kDefaultHangTimeoutS = 60;
// Above this a timeout is no timeout; also keeps seconds * 1e9 far inside int64 nanoseconds.
inline constexpr double kMaxHangTimeoutS = 1e7;  // ~116 days

inline constexpr const char* kAnalyzer = "LOCKSTEP_ANALYZER";  // path of lockstep; unset: no diagnosis

// The trace-size cap per process: 256 MiB keeps ~7 M ops at full detail (schema 2, ~35
// bytes/op) and costs a 256-rank job 64 GiB on its shared filesystem at most. 0 = no cap.
inline constexpr const char* kMaxMb = "LOCKSTEP_MAX_MB";
inline constexpr int64_t kDefaultMaxMb = 256;
inline constexpr int64_t kMinMaxMb = 1;        // below this the header alone does not fit
inline constexpr int64_t kMaxMaxMb = 1 << 22;  // 4 TiB: far beyond any filesystem's file

inline constexpr const char* kCompletion = "LOCKSTEP_COMPLETION";  // event|memop|covering
inline constexpr const char* kDefaultCompletion = "event";
// covering: at most this many ops of a stream between two covering events; 1 = an event after
// every op.
inline constexpr const char* kCompletionWindow = "LOCKSTEP_COMPLETION_WINDOW";
inline constexpr int64_t kDefaultCompletionWindow = 8;
inline constexpr int64_t kMaxCompletionWindow = 4096;

inline constexpr const char* kBenchOff = "LOCKSTEP_BENCH_OFF";  // benchmarks only (bench_knobs.h)

// The record queue's capacity in records (a power of two): tests shrink it to force drops
// (a full queue refuses records; they are counted and located, never silently lost).
inline constexpr const char* kQueueRecords = "LOCKSTEP_QUEUE_RECORDS";
inline constexpr int64_t kDefaultQueueRecords = int64_t(1) << 16;  // ~10 MiB of slots: the memory bound
inline constexpr int64_t kMinQueueRecords = 64;                   // room for an op and its parts
inline constexpr int64_t kMaxQueueRecords = int64_t(1) << 22;

// The spill: when the record queue refuses, records go to an overflow area in memory of at most
// this many MiB (0: none, a full queue drops at once); dropped only when it is full too.
inline constexpr const char* kSpillMb = "LOCKSTEP_SPILL_MB";
inline constexpr int64_t kDefaultSpillMb = 64;
inline constexpr int64_t kMaxSpillMb = 4096;

// At exit, how long the program waits for the recorder's final commit while the commit makes no
// progress (no record inserted, no write or sync of the trace returned): a dead file system holds
// the exit this long at most; a slow one that still writes is waited for up to kExitWaitTotalFactor
// times as long in all.
inline constexpr const char* kExitWait = "LOCKSTEP_EXIT_WAIT";
inline constexpr double kDefaultExitWaitS = 10;
inline constexpr double kMinExitWaitS = 0.1;
inline constexpr double kMaxExitWaitS = 600;
inline constexpr int kExitWaitTotalFactor = 6;

// What SIGUSR1 does to a program that left it at its default action (death): "default" flushes
// the trace and then lets SIGUSR1 kill the program, as it would without the recorder; "flush"
// flushes and lets the program live on (the flush-on-demand `lockstep run` sets, so that
// `scancel --signal=USR1` snapshots a running job). A program's own SIGUSR1 handler is called
// either way.
inline constexpr const char* kSigusr1 = "LOCKSTEP_SIGUSR1";
inline constexpr const char* kSigusr1Default = "default";
inline constexpr const char* kSigusr1Flush = "flush";

// ---- set by lockstep's own tools -----------------------------------------------------------------
inline constexpr const char* kPreload = "LOCKSTEP_PRELOAD";  // the recorder library `lockstep run` preloads
inline constexpr const char* kRendezvousDir = "LOCKSTEP_RENDEZVOUS_DIR";  // lockstep-launch, replay workers
inline constexpr const char* kLaunchId = "LOCKSTEP_LAUNCH_ID";
inline constexpr const char* kReplayWorker = "LOCKSTEP_REPLAY_WORKER";  // the replay worker executable

// The documented recorder settings and their defaults as docs/recorder.md's table shows them
// (the test compares the table's third column with these).
struct Documented {
  const char* name;
  const char* default_text;
};
inline constexpr Documented kDocumented[] = {
    {kDir, "`./lockstep-trace`"},
    {kStacks, "`python` when CPython is in the process, else `native`"},
    {kHangTimeout, "`60`"},
    {kMaxMb, "`256`"},
    {kAnalyzer, "unset"},
    {kCompletion, "`event`"},
    {kCompletionWindow, "`8`"},
    {kBenchOff, "unset"},
    {kQueueRecords, "`65536`"},
    {kSpillMb, "`64`"},
    {kSigusr1, "`default`"},
    {kExitWait, "`10`"},
};

}  // namespace lockstep::schema::env
