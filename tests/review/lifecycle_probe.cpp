// Review 2026-12-02 (docs/review-2026-12-02.md): a program with one scenario per finding about
// the recorder's process lifecycle (signals, exit, exec). lifecycle_review_test.cpp runs it with
// and without LD_PRELOAD=liblockstep.so and compares what the program sees.
//   review_lifecycle_probe SCENARIO        (stub NCCL/CUDA of tests/recorder)
#include <nccl.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

const char* g_self = nullptr;
volatile sig_atomic_t g_handled = 0;
volatile sig_atomic_t g_sigint_blocked_in_handler = -1;

cudaStream_t stream() { return reinterpret_cast<cudaStream_t>(uintptr_t(0x5000)); }
float buf[64];

#define CHECK(call)                                                              \
  do {                                                                           \
    if ((call) != ncclSuccess) {                                                 \
      fprintf(stderr, "probe: %s failed (line %d)\n", #call, __LINE__);          \
      exit(2);                                                                   \
    }                                                                            \
  } while (0)

// The recorder starts (and installs its handlers) at the first NCCL call.
ncclComm_t nccl_ops(int n, char id_byte = 1) {
  ncclUniqueId id;
  memset(&id, id_byte, sizeof id);
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRank(&c, 1, id, 0));
  for (int i = 0; i < n; i++) CHECK(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c, stream()));
  return c;
}

void on_flag(int) {
  g_handled = g_handled + 1;
}

void on_check_mask(int) {
  sigset_t cur;
  pthread_sigmask(SIG_SETMASK, nullptr, &cur);
  g_sigint_blocked_in_handler = sigismember(&cur, SIGINT);
}

void install(int sig, void (*h)(int), int flags, int also_block = 0) {
  struct sigaction sa {};
  sa.sa_handler = h;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  if (also_block) sigaddset(&sa.sa_mask, also_block);
  sigaction(sig, &sa, nullptr);
}

void say(const char* s) {
  printf("%s\n", s);
  fflush(stdout);
}

// --- finding L1: a signal the program ignores stays ignored in the programs it execs ---------
int scenario_ignore_then_exec() {
  signal(SIGINT, SIG_IGN);
  nccl_ops(2);
  execl(g_self, g_self, "print_sigint_disposition", static_cast<char*>(nullptr));
  perror("execl");
  return 3;
}

int scenario_print_sigint_disposition() {
  struct sigaction sa {};
  sigaction(SIGINT, nullptr, &sa);
  const bool info = sa.sa_flags & SA_SIGINFO;
  say(!info && sa.sa_handler == SIG_IGN ? "SIGINT SIG_IGN"
      : !info && sa.sa_handler == SIG_DFL ? "SIGINT SIG_DFL"
                                           : "SIGINT handler");
  return 0;
}

// --- finding L2: the program's handler keeps its flags and mask ------------------------------
// A handler installed without SA_RESTART interrupts a blocking read (EINTR). A helper thread
// sends the signal to the main thread after 300 ms and, 3 s later, writes a byte so that a
// restarted read returns instead of hanging the test.
int g_pipe[2];
pthread_t g_main;
void* signal_main_thread(void*) {
  usleep(300 * 1000);
  pthread_kill(g_main, SIGTERM);
  sleep(3);
  char c = 'x';
  ssize_t ignored = write(g_pipe[1], &c, 1);
  (void)ignored;
  return nullptr;
}
int scenario_eintr_read() {
  install(SIGTERM, on_flag, 0);  // no SA_RESTART: the program wants EINTR
  nccl_ops(2);
  if (pipe(g_pipe) != 0) return 3;
  g_main = pthread_self();
  pthread_t t;
  pthread_create(&t, nullptr, signal_main_thread, nullptr);
  char c;
  ssize_t n = read(g_pipe[0], &c, 1);
  int e = errno;
  if (n < 0 && e == EINTR) say("read interrupted");
  else say("read restarted");
  printf("handled %d\n", int(g_handled));
  fflush(stdout);
  _exit(0);  // the helper thread still sleeps
}

// A one-shot handler (SA_RESETHAND): the first SIGTERM is handled, the second kills.
int scenario_resethand() {
  install(SIGTERM, on_flag, SA_RESETHAND);
  nccl_ops(2);
  raise(SIGTERM);
  say("first handled");
  raise(SIGTERM);
  say("second survived");
  return 0;
}

// The handler's sa_mask: SIGINT is blocked while the SIGTERM handler runs.
int scenario_handler_mask() {
  install(SIGTERM, on_check_mask, 0, SIGINT);
  nccl_ops(2);
  raise(SIGTERM);
  say(g_sigint_blocked_in_handler == 1 ? "SIGINT blocked in handler" : "SIGINT not blocked in handler");
  return 0;
}

// --- finding L3: a handled signal is not an exit ----------------------------------------------
// The program handles SIGTERM and goes on; then it ends without an exit record (_exit, as a
// SIGKILL or a lost node would end it): the history after the last commit is unknown.
int scenario_handled_sigterm_then_vanish() {
  install(SIGTERM, on_flag, SA_RESTART);
  ncclComm_t c = nccl_ops(4);
  raise(SIGTERM);
  usleep(200 * 1000);  // the writer commits: what follows is the program going on
  for (int i = 0; i < 4; i++) CHECK(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c, stream()));
  say("still running");
  _exit(0);
}

// --- finding L4: exec keeps the trace of the image before it ----------------------------------
int scenario_ops_then_exec() {
  nccl_ops(3);
  usleep(300 * 1000);  // committed (the writer commits every 50 ms)
  execl(g_self, g_self, "ops_after_exec", static_cast<char*>(nullptr));
  perror("execl");
  return 3;
}
int scenario_ops_after_exec() {
  ncclComm_t c = nccl_ops(2, 2);
  CHECK(ncclCommDestroy(c));
  return 0;
}

// --- finding L6: signals that end the process without a flush ---------------------------------
int scenario_ops_then_sighup() {
  nccl_ops(20);
  raise(SIGHUP);
  return 0;
}

// --- finding L7: quick_exit ---------------------------------------------------------------------
int scenario_ops_then_quick_exit() {
  nccl_ops(20);
  quick_exit(0);
}

// --- finding L9: the recorder's own stderr lines ---------------------------------------------
// An op on the stub's stuck stream: the watchdog's hang line (LOCKSTEP_HANG_TIMEOUT) goes to
// stderr, from the watchdog thread, while the program sleeps.
void hang_for(double seconds) {
  ncclComm_t c = nccl_ops(1);
  CHECK(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, c,
                      reinterpret_cast<cudaStream_t>(uintptr_t(0xDEAD0))));  // stub_cuda.h kStuckStream
  timespec left{time_t(seconds), long((seconds - time_t(seconds)) * 1e9)};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

// The program's stderr is a pipe whose reader is gone (`prog 2>&1 | head -1` after head
// exited); the program itself never writes to it.
int scenario_stderr_broken_pipe() {
  signal(SIGPIPE, SIG_DFL);  // a C program's default (a test runner may hand down SIG_IGN)
  int p[2];
  if (pipe(p) != 0) return 3;
  close(p[0]);
  dup2(p[1], 2);
  close(p[1]);
  hang_for(1.5);
  say("done");
  return 0;
}

// The program closed stderr and its next open() got descriptor 2 (a daemon's data file).
int scenario_stderr_fd_reused(const char* data_path) {
  close(2);
  int fd = open(data_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd != 2) return 3;
  hang_for(1.5);
  const char data[] = "program data\n";
  ssize_t ignored = write(fd, data, sizeof data - 1);
  (void)ignored;
  return 0;
}

// The analyzer the recorder spawns on a hang (LOCKSTEP_ANALYZER, set by `lockstep run`) is the
// program's child: its exit sends the program a SIGCHLD it did not ask for.
volatile sig_atomic_t g_sigchld = 0;
void on_sigchld(int) { g_sigchld = g_sigchld + 1; }
int scenario_sigchld_count() {
  install(SIGCHLD, on_sigchld, SA_RESTART);
  hang_for(2.5);
  printf("sigchld %d\n", int(g_sigchld));
  fflush(stdout);
  return 0;
}

// --- guards (sound on the reviewed code) -------------------------------------------------------
// exit() from a thread other than main: atexit runs there, the trace is finished.
void* ops_then_exit(void*) {
  nccl_ops(10);
  exit(5);
}
int scenario_exit_from_thread() {
  pthread_t t;
  pthread_create(&t, nullptr, ops_then_exit, nullptr);
  for (;;) pause();
}

int scenario_ops_then_abort() {
  nccl_ops(20);
  abort();
}

// A forked child that execs a program without NCCL: no trace file, nothing on stderr.
int scenario_fork_exec_child() {
  nccl_ops(3);
  pid_t child = fork();
  if (child == 0) {
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 6;
}

}  // namespace

int main(int argc, char** argv) {
  g_self = argv[0];
  std::string s = argc > 1 ? argv[1] : "";
  if (s == "ignore_then_exec") return scenario_ignore_then_exec();
  if (s == "print_sigint_disposition") return scenario_print_sigint_disposition();
  if (s == "eintr_read") return scenario_eintr_read();
  if (s == "resethand") return scenario_resethand();
  if (s == "handler_mask") return scenario_handler_mask();
  if (s == "handled_sigterm_then_vanish") return scenario_handled_sigterm_then_vanish();
  if (s == "ops_then_exec") return scenario_ops_then_exec();
  if (s == "ops_after_exec") return scenario_ops_after_exec();
  if (s == "ops_then_sighup") return scenario_ops_then_sighup();
  if (s == "ops_then_quick_exit") return scenario_ops_then_quick_exit();
  if (s == "stderr_broken_pipe") return scenario_stderr_broken_pipe();
  if (s == "stderr_fd_reused" && argc > 2) return scenario_stderr_fd_reused(argv[2]);
  if (s == "sigchld_count") return scenario_sigchld_count();
  if (s == "ops_then_abort_free_exit") {
    ncclCommDestroy(nccl_ops(20));
    return 0;
  }
  if (s == "exit_from_thread") return scenario_exit_from_thread();
  if (s == "ops_then_abort") return scenario_ops_then_abort();
  if (s == "fork_exec_child") return scenario_fork_exec_child();
  fprintf(stderr, "review_lifecycle_probe: unknown scenario %s\n", s.c_str());
  return 64;
}
