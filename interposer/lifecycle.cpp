// Exit, signals and fork: the trace is committed on normal exit, on SIGTERM/SIGINT/SIGABRT/
// SIGUSR1, and a forked child starts its own trace.
//
// Signal flush: a handler may not touch SQLite or take locks, so it wakes the writer thread
// (write(2) to an eventfd) and waits for its acknowledgement with poll(2) on a pipe, bounded by
// 1 s — both async-signal-safe. The writer commits everything queued plus meta exit_reason. If
// the signal lands on the writer thread itself, or the writer is stuck, the handler does not
// wait (longer): at worst the last ~50 ms are lost. Then the previous disposition runs: a
// handler is called, SIG_IGN returns, SIG_DFL is restored and the signal re-raised (it is
// delivered when this handler returns). SIGUSR1 whose previous disposition was SIG_DFL is
// taken as "flush now" and does not kill the process.
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "recorder_state.h"

namespace lockstep::rec {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGABRT, SIGUSR1};
struct sigaction g_previous[65];
std::atomic<bool> g_installed{false};  // once per process image (inherited across fork)

const char* reason_of(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGABRT: return "SIGABRT";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal";
  }
}

void on_signal(int sig, siginfo_t* info, void* uctx) {
  int saved_errno = errno;
  Recorder* r = current_recorder();
  if (r && r->writer && !r->writer->failed() && !r->writer->is_writer_thread()) {
    r->writer->signal_flush_begin(reason_of(sig));
    r->writer->signal_flush_wait(1000);
  }
  const struct sigaction& prev = g_previous[sig];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, uctx);
  } else if (prev.sa_handler == SIG_IGN) {
    // ignored before us: stays ignored
  } else if (prev.sa_handler == SIG_DFL) {
    if (sig != SIGUSR1) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(sig, &dfl, nullptr);
      raise(sig);  // pending until this handler returns, then the default action
    }
  } else {
    prev.sa_handler(sig);
  }
  errno = saved_errno;
}

void on_exit_handler() { shutdown_recorder("exit"); }

void before_fork() {}
void after_fork_child() { reset_after_fork(); }

}  // namespace

void install_lifecycle_handlers() noexcept {
  if (g_installed.exchange(true)) return;
  atexit(on_exit_handler);
  pthread_atfork(before_fork, nullptr, after_fork_child);
  for (int sig : kSignals) {
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, &g_previous[sig]);
  }
}

}  // namespace lockstep::rec
