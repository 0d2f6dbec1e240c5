// Exit, signals and fork: the trace is committed on normal exit (atexit and at_quick_exit), on
// the signals of kSignals, and a forked child starts its own trace (sqlite_section.h: fork waits
// until no recorder thread is inside SQLite).
//
// Signal flush: a handler may not touch SQLite or take locks, so it wakes the writer thread
// (write(2) to an eventfd) and waits for its acknowledgement with poll(2) on a pipe, bounded by
// 1 s — both async-signal-safe. The writer commits everything queued. If the signal lands on the
// writer thread itself, or the writer is stuck, the handler does not wait (longer): at worst the
// last ~50 ms are lost. Then the previous disposition runs: a handler is called, SIG_DFL is
// restored and the signal re-raised (it is delivered when this handler returns). SIGUSR1 is the
// recorder's "flush now": over SIG_DFL it flushes and then kills the process as it would have
// without the recorder (exit_reason SIGUSR1_default), unless LOCKSTEP_SIGUSR1=flush (which
// `lockstep run` sets) asks to flush and live on (exit_reason SIGUSR1, a snapshot, not an end).
//
// The program must not see a difference (docs/review-2026-12-02.md L1-L3, L6, L7):
// - a signal the program ignores keeps SIG_IGN (no handler of ours: exec'd children inherit it,
//   and it interrupts no syscall);
// - over a program's handler ours is installed with that handler's SA_RESTART / SA_ONSTACK /
//   SA_NODEFER and mask, and SA_RESETHAND is applied by hand before calling it;
// - meta exit_reason is written only when the default action (death) follows: a signal that a
//   handler takes may let the process go on, and what it records afterwards would otherwise be
//   read as a finished history.
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "config.h"
#include "recorder_state.h"
#include "sqlite_section.h"

namespace lockstep::rec {
namespace {

// Signals whose default action ends the process and after which a flush is safe (not the crash
// signals: waiting for another thread from a crashed one is not). SIGPIPE and SIGXFSZ here are the
// program's own (the recorder's writes block both in the threads that make them).
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGABRT, SIGUSR1, SIGHUP,
                            SIGQUIT, SIGPIPE, SIGXFSZ, SIGALRM, SIGUSR2};
struct sigaction g_previous[65];
bool g_sigusr1_flush_only = false;  // LOCKSTEP_SIGUSR1=flush, read when the handlers are installed
// exit_reason of a process SIGUSR1 killed after the flush (its default action): "SIGUSR1" alone is
// the flush request's marker, which readers take as "lives on".
constexpr const char* kSigusr1DeathReason = "SIGUSR1_default";
std::atomic<bool> g_installed{false};  // once per process image (inherited across fork)

const char* reason_of(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGABRT: return "SIGABRT";
    case SIGUSR1: return "SIGUSR1";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGPIPE: return "SIGPIPE";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGALRM: return "SIGALRM";
    case SIGUSR2: return "SIGUSR2";
    default: return "signal";
  }
}

bool is_default(const struct sigaction& a) { return !(a.sa_flags & SA_SIGINFO) && a.sa_handler == SIG_DFL; }

void on_signal(int sig, siginfo_t* info, void* uctx) {
  int saved_errno = errno;
  const struct sigaction& prev = g_previous[sig];
  // SIGUSR1 over SIG_DFL with LOCKSTEP_SIGUSR1=flush: the user's "flush now", and nothing more.
  const bool flush_request = sig == SIGUSR1 && is_default(prev) && g_sigusr1_flush_only;
  const bool ends_process = is_default(prev) && !flush_request;
  Recorder* r = current_recorder();
  if (r && r->writer && !r->writer->failed() && !r->writer->is_writer_thread()) {
    // "" = flush without an exit record: the program's handler decides whether this is the end.
    // A flush request's marker is SIGUSR1, which no reader takes as an end; SIGUSR1's death
    // has a name of its own.
    const char* reason = flush_request ? reason_of(sig)
                         : ends_process ? (sig == SIGUSR1 ? kSigusr1DeathReason : reason_of(sig))
                                        : "";
    r->writer->signal_flush_begin(reason);
    r->writer->signal_flush_wait(1000);
  }
  if (prev.sa_flags & SA_RESETHAND) {
    // What the kernel would have done on entry, had the program's handler been the installed one.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
  }
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, uctx);
  } else if (prev.sa_handler == SIG_DFL) {
    if (ends_process) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(sig, &dfl, nullptr);
      raise(sig);  // pending until this handler returns, then the default action
    }
  } else if (prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  }
  errno = saved_errno;
}

void on_exit_handler() { shutdown_recorder("exit"); }

void before_fork() { sqlite_section_before_fork(); }
void after_fork_parent() { sqlite_section_after_fork_parent(); }
void after_fork_child() {
  const bool sqlite_usable = sqlite_section_after_fork_child();
  reset_after_fork();
  if (!sqlite_usable) stay_untraced_after_fork();
}

}  // namespace

void install_lifecycle_handlers() noexcept {
  if (g_installed.exchange(true)) return;
  g_sigusr1_flush_only = config().sigusr1_flush_only;
  atexit(on_exit_handler);
  at_quick_exit(on_exit_handler);
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  for (int sig : kSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;  // stays ignored
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    if (is_default(old)) {
      sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
      sigemptyset(&sa.sa_mask);
    } else {  // the program's handler: the kernel applies its flags and mask, as without us
      sa.sa_flags = SA_SIGINFO | (old.sa_flags & (SA_RESTART | SA_ONSTACK | SA_NODEFER));
      sa.sa_mask = old.sa_mask;
    }
    g_previous[sig] = old;
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace lockstep::rec
