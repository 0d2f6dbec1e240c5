#include "sqlite_section.h"

#include <pthread.h>
#include <time.h>

#include <atomic>

namespace lockstep::rec {
namespace {
// Recursive: a section may open inside another on the writer's error paths.
pthread_mutex_t g_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
// The turnstile every section passes on its way in: a fork holding it keeps a busy writer (its
// rounds back to back, the mutex never free for long) from taking the section again.
pthread_mutex_t g_turnstile = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
std::atomic<bool> g_fork_waiting{false};
thread_local int t_depth = 0;  // sections this thread is inside
bool g_turnstile_held = false;  // by the forking thread, between prepare and after
bool g_held_for_fork = false;

timespec deadline_in_ms(int ms) {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_nsec += long(ms % 1000) * 1000000L;
  t.tv_sec += ms / 1000 + t.tv_nsec / 1000000000L;
  t.tv_nsec %= 1000000000L;
  return t;
}
}  // namespace

SqliteSection::SqliteSection() noexcept {
  pthread_mutex_lock(&g_turnstile);
  pthread_mutex_lock(&g_mu);
  pthread_mutex_unlock(&g_turnstile);
  ++t_depth;
}
SqliteSection::~SqliteSection() noexcept {
  --t_depth;
  pthread_mutex_unlock(&g_mu);
}

void SqliteSection::let_fork_in() noexcept {
  if (!g_fork_waiting.load(std::memory_order_relaxed) || t_depth != 1) return;
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_lock(&g_turnstile);  // held by the fork until it is done
  pthread_mutex_lock(&g_mu);
  pthread_mutex_unlock(&g_turnstile);
}

void sqlite_section_before_fork() noexcept {
  const timespec deadline = deadline_in_ms(kForkWaitMs);
  g_fork_waiting.store(true, std::memory_order_relaxed);
  g_turnstile_held = pthread_mutex_timedlock(&g_turnstile, &deadline) == 0;
  g_held_for_fork = g_turnstile_held && pthread_mutex_timedlock(&g_mu, &deadline) == 0;
  g_fork_waiting.store(false, std::memory_order_relaxed);
}

void sqlite_section_after_fork_parent() noexcept {
  if (g_held_for_fork) pthread_mutex_unlock(&g_mu);
  if (g_turnstile_held) pthread_mutex_unlock(&g_turnstile);
  g_held_for_fork = g_turnstile_held = false;
}

bool sqlite_section_after_fork_child() noexcept {
  const bool usable = g_held_for_fork;
  // The parent's other threads do not exist here: whatever they held is released by starting over.
  const pthread_mutex_t fresh = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
  g_mu = fresh;
  g_turnstile = fresh;
  g_held_for_fork = g_turnstile_held = false;
  g_fork_waiting.store(false, std::memory_order_relaxed);
  return usable;
}

}  // namespace lockstep::rec
