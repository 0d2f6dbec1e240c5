// The recorder's lock-free structures on their own: the bounded queue and the comm table.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bounded_queue.h"
#include "comm_table.h"
#include "stack_capture.h"

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

// ---- native frames below liblockstep's own (stack_capture.h innermost_frames) --------------
// A fake unwinder over a synthetic stack: frame addresses below 0x100 are "ours", the rest the
// caller's. What innermost_frames returns must be exactly what asking for want + kOwnFrames
// frames gives, however many own frames it has learnt to expect.
namespace fake_stack {
std::vector<uintptr_t> frames;
int asked_last = 0;
int calls = 0;
int unwind(void** out, int n) {
  asked_last = n;
  calls++;
  int k = 0;
  for (; k < n && k < int(frames.size()); k++) out[k] = reinterpret_cast<void*>(frames[k]);
  return k;
}
bool own(const void* pc) { return reinterpret_cast<uintptr_t>(pc) < 0x100; }
void set(int own_frames, int caller_frames) {
  frames.clear();
  for (int i = 0; i < own_frames; i++) frames.push_back(0x10 + i);
  for (int i = 0; i < caller_frames; i++) frames.push_back(0x1000 + i);
}
// The frames of the old rule: ask for want + kOwnFrames, skip the own prefix, keep want.
std::vector<uintptr_t> reference(int want) {
  std::vector<uintptr_t> out;
  int n = std::min<int>(want + kOwnFrames, int(frames.size()));
  int skip = 0;
  while (skip < n && own(reinterpret_cast<void*>(frames[skip]))) skip++;
  for (int i = skip; i < n && int(out.size()) < want; i++) out.push_back(frames[i]);
  return out;
}
}  // namespace fake_stack

TEST(InnermostFrames, equal_the_old_rules_frames_while_asking_for_fewer) {
  std::atomic<int> seen{-1};
  uintptr_t out[kMaxNativeFrames];
  int unwound = 0;
  bool retried = false;
  auto take = [&](int want) {
    int k = innermost_frames(fake_stack::unwind, fake_stack::own, seen, want, out, &unwound, &retried);
    return std::vector<uintptr_t>(out, out + k);
  };
  // First capture: nothing learnt, asks for want + kOwnFrames; learns 3 own frames.
  fake_stack::set(3, 40);
  EXPECT_EQ(take(12), fake_stack::reference(12));
  EXPECT_EQ(fake_stack::asked_last, 12 + kOwnFrames);
  EXPECT_EQ(seen.load(), 3);
  // Then asks for want + 3 only, same frames.
  fake_stack::calls = 0;
  EXPECT_EQ(take(12), fake_stack::reference(12));
  EXPECT_EQ(fake_stack::asked_last, 15);
  EXPECT_EQ(fake_stack::calls, 1);
  EXPECT_FALSE(retried);
  // A deeper path of ours (5 own frames): the short answer is asked again, in full; learnt.
  fake_stack::set(5, 40);
  fake_stack::calls = 0;
  EXPECT_EQ(take(12), fake_stack::reference(12));
  EXPECT_TRUE(retried);
  EXPECT_EQ(fake_stack::calls, 2);
  EXPECT_EQ(seen.load(), 5);
  // A shallower path again: fewer own frames than learnt, same frames, one call.
  fake_stack::set(2, 40);
  fake_stack::calls = 0;
  EXPECT_EQ(take(12), fake_stack::reference(12));
  EXPECT_EQ(fake_stack::calls, 1);
  // Stacks shorter than asked, own frames beyond the learnt count: all of the caller's frames.
  for (int own_frames : {0, 1, 4, 7, 8}) {
    for (int caller : {0, 1, 6, 12, 13, 30}) {
      fake_stack::set(own_frames, caller);
      for (int want : {1, 12, kMaxNativeFrames}) {
        EXPECT_EQ(take(want), fake_stack::reference(want))
            << own_frames << " own, " << caller << " caller's, want " << want;
      }
    }
  }
  // More own frames than kOwnFrames: the old rule's answer too (none of the caller's).
  fake_stack::set(kOwnFrames + 2, 30);
  EXPECT_EQ(take(12), fake_stack::reference(12));
}
