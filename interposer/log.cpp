#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <string>

#include "text_escape.h"

namespace lockstep::rec {
namespace {

// Descriptor 2 as the process had it when the library was loaded. A program may close it and
// open a file of its own in its place (a daemon's data file): lines go only to the original.
struct StderrIdentity {
  bool valid = false;
  dev_t dev = 0;
  ino_t ino = 0;
};
StderrIdentity g_stderr;

__attribute__((constructor)) void remember_stderr() {
  int saved = errno;
  struct stat st;
  if (fstat(2, &st) == 0) g_stderr = {true, st.st_dev, st.st_ino};
  errno = saved;
}

bool stderr_is_the_original() {
  struct stat st;
  return g_stderr.valid && fstat(2, &st) == 0 && st.st_dev == g_stderr.dev && st.st_ino == g_stderr.ino;
}

// write(2) with SIGPIPE blocked in this thread: a stderr pipe whose reader is gone gives EPIPE
// here instead of killing the program, and the SIGPIPE the write raised is discarded.
void write_stderr(const char* p, size_t n) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  if (pthread_sigmask(SIG_BLOCK, &pipe_set, &old) != 0) return;
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE);
  if (write(2, p, n) < 0 && errno == EPIPE && !was_pending) {
    const timespec zero{};
    sigtimedwait(&pipe_set, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

void warn(const char* fmt, ...) {
  const int saved_errno = errno;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (m < 0) m = 0;
  if (m > int(sizeof text) - 1) m = sizeof text - 1;
  // Paths and environment values come from the user: no byte of theirs reaches the terminal
  // as a control sequence (a cut UTF-8 sequence at the end is escaped too).
  std::string line = "lockstep: " + printable(std::string_view(text, size_t(m)));
  line += '\n';
  if (stderr_is_the_original()) write_stderr(line.data(), line.size());
  errno = saved_errno;
}

}  // namespace lockstep::rec
