// The recorder's lock-free structures on their own: the bounded queue and the comm table.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <cstddef>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bounded_join.h"
#include "bounded_queue.h"
#include "comm_table.h"

using namespace lockstep::rec;

TEST(BoundedQueue, refuses_pushes_when_full_and_accepts_again_after_a_pop) {
  BoundedQueue<int> q(4);
  for (int i = 0; i < 4; i++) EXPECT_TRUE(q.push(i)) << i;
  EXPECT_FALSE(q.push(99)) << "a full queue refuses instead of blocking";
  int v = -1;
  ASSERT_TRUE(q.pop(v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(q.push(4));
  std::vector<int> rest;
  while (q.pop(v)) rest.push_back(v);
  EXPECT_EQ(rest, (std::vector<int>{1, 2, 3, 4}));
}

TEST(BoundedQueue, a_run_is_queued_whole_or_refused_whole) {
  // An op and its part records (issue 29): never the op without its parts.
  BoundedQueue<int> q(8);
  for (int i = 0; i < 6; i++) ASSERT_TRUE(q.push(i));
  const int run[3] = {100, 101, 102};
  auto four = [](const int&) { return sizeof(int); };
  EXPECT_FALSE(q.push_many(run, 3, four)) << "2 cells free: the run of 3 is refused";
  EXPECT_TRUE(q.push(6)) << "the refused run took no cell";
  int v = -1;
  ASSERT_TRUE(q.pop(v));
  ASSERT_TRUE(q.pop(v));
  EXPECT_TRUE(q.push_many(run, 3, four));
  std::vector<int> rest;
  while (q.pop(v)) rest.push_back(v);
  EXPECT_EQ(rest, (std::vector<int>{2, 3, 4, 5, 6, 100, 101, 102}));
  EXPECT_FALSE(q.push_many(run, 3, four) && q.push_many(run, 3, four) && q.push_many(run, 3, four))
      << "9 values never fit 8 cells";
}

TEST(BoundedQueue, a_prefix_push_delivers_the_prefix_and_full_pushes_stay_whole) {
  struct Tagged {
    int32_t tag;
    int32_t small;
    char big[120];
  };
  BoundedQueue<Tagged> q(2);
  Tagged full{1, 11, {}};
  std::memset(full.big, 'x', sizeof full.big);
  Tagged shrt{2, 22, {}};
  std::memset(shrt.big, 'y', sizeof shrt.big);
  ASSERT_TRUE(q.push(full));
  ASSERT_TRUE(q.push(shrt, offsetof(Tagged, big)));  // tag and small only
  Tagged out{};
  ASSERT_TRUE(q.pop(out));
  EXPECT_EQ(out.tag, 1);
  EXPECT_EQ(out.small, 11);
  EXPECT_EQ(std::string(out.big, sizeof out.big), std::string(sizeof out.big, 'x'));
  ASSERT_TRUE(q.pop(out));
  EXPECT_EQ(out.tag, 2);
  EXPECT_EQ(out.small, 22);
  EXPECT_NE(out.big[0], 'y') << "bytes past the prefix were copied";
  // The cell reused by a full push carries the whole value again.
  ASSERT_TRUE(q.push(shrt));
  ASSERT_TRUE(q.pop(out));
  EXPECT_EQ(std::string(out.big, sizeof out.big), std::string(sizeof out.big, 'y'));
}

TEST(BoundedQueue, concurrent_producers_lose_nothing_they_were_told_was_accepted) {
  BoundedQueue<int64_t> q(1 << 10);
  std::atomic<int64_t> accepted{0};
  std::atomic<bool> done{false};
  std::set<int64_t> seen;
  std::thread consumer([&] {
    int64_t v;
    for (;;) {
      if (q.pop(v)) {
        EXPECT_TRUE(seen.insert(v).second) << "duplicate " << v;
      } else if (done.load()) {
        if (!q.pop(v)) break;
        seen.insert(v);
      }
    }
  });
  std::vector<std::thread> producers;
  for (int t = 0; t < 4; t++)
    producers.emplace_back([&, t] {
      for (int64_t i = 0; i < 50000; i++)
        if (q.push(t * 1000000 + i)) accepted.fetch_add(1);
    });
  for (auto& p : producers) p.join();
  done.store(true);
  consumer.join();
  EXPECT_EQ(int64_t(seen.size()), accepted.load());
}

TEST(CommTable, retired_handle_is_not_found_and_can_be_registered_again) {
  static CommTable table;  // large: not on the stack
  CommState a, b;
  void* h = reinterpret_cast<void*>(0x1000);
  table.insert(h, &a);
  EXPECT_EQ(table.find(h), &a);
  table.retire(h);
  EXPECT_EQ(table.find(h), nullptr);
  table.insert(h, &b);
  EXPECT_EQ(table.find(h), &b) << "a reused handle is a new communicator";
  EXPECT_EQ(table.find(nullptr), nullptr);
}

TEST(CommTable, many_handles_colliding_in_probing_stay_distinct) {
  static CommTable table;
  std::vector<CommState> states(3000);
  for (size_t i = 0; i < states.size(); i++)
    table.insert(reinterpret_cast<void*>(0x10000 + i * 0x1000), &states[i]);
  for (size_t i = 0; i < states.size(); i += 2)
    table.retire(reinterpret_cast<void*>(0x10000 + i * 0x1000));
  for (size_t i = 0; i < states.size(); i++) {
    CommState* want = i % 2 ? &states[i] : nullptr;
    ASSERT_EQ(table.find(reinterpret_cast<void*>(0x10000 + i * 0x1000)), want) << i;
  }
}

// exit() from a signal handler that interrupted malloc: the exiting thread holds the malloc
// arena's lock while it joins the writer, and the writer, done (marked), blocks in its
// teardown on that lock. Before: join_while_progressing joined without a bound once the thread
// had marked its exit, and the program never exited. Here the lock is a mutex the joiner holds.
TEST(ThreadExit, a_marked_thread_blocked_in_its_teardown_is_left_within_a_bound) {
  using namespace lockstep::rec;
  // Outlive the test: the thread is left running, detached, until the lock is released.
  static std::mutex held;
  static ThreadExit exit_mark;
  std::unique_lock<std::mutex> lock(held);
  std::thread t([] {
    exit_mark.mark();
    std::lock_guard<std::mutex> g(held);  // the teardown's lock
  });
  const auto t0 = std::chrono::steady_clock::now();
  const bool joined = exit_mark.join_while_progressing(t, 5000, 5000, [] { return uint64_t(0); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(joined) << "it marked its exit: its work is done";
  EXPECT_FALSE(t.joinable());
  EXPECT_LT(s, 2.0) << "the join after the mark is bounded (ThreadExit::kTeardownMs)";
  lock.unlock();  // the detached thread ends now
}

TEST(ThreadExit, a_thread_that_ends_after_its_mark_is_joined) {
  using namespace lockstep::rec;
  ThreadExit exit_mark;
  std::thread t([&] { exit_mark.mark(); });
  EXPECT_TRUE(exit_mark.join_while_progressing(t, 5000, 5000, [] { return uint64_t(0); }));
  EXPECT_FALSE(t.joinable());
}
