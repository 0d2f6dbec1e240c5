// The model checker's engine (model_check.h, docs/replay.md): per-rank queues of units over the
// work list, run to a fixed point; model_engine.cpp builds and runs it, model_explain.cpp says why
// a stuck unit cannot progress.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model_check.h"
#include "model_work_list.h"

namespace lockstep::model::detail {

// The engine's arrays of one entry an op: from 2 MiB on, on transparent huge pages where the
// kernel gives them on request (madvise mode): first-touch page faults of 4 KiB pages were a third
// of building an engine (16,384 ranks x 500 ops: ~600 MB, 150 k faults).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t(2) << 20;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n > (SIZE_MAX - kHuge) / sizeof(T)) throw std::bad_alloc();
    const size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return std::allocator<T>().allocate(n);
    const size_t whole = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, whole);
    if (!p) throw std::bad_alloc();
    madvise(p, whole, MADV_HUGEPAGE);  // advice: where THP is off, plain pages
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHuge) std::allocator<T>().deallocate(p, n);
    else std::free(p);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const HugePageAllocator<U>&) const { return false; }
};
template <class T>
using OpArray = std::vector<T, HugePageAllocator<T>>;

// Collective instance slots, at most (kMaxModelRanks says what the largest traces take).
constexpr size_t kMaxInstanceSlots = size_t(1) << 28;

// 40 bytes, one per op (a group: one for its ops): the engine's largest array. Its rank is its
// first item's (Engine::unit_proc); a barrier's marker is kept beside (Engine::barrier_markers_).
struct Unit {
  int32_t thread = 0;       // host thread that issues it
  int32_t first_item = 0;   // global item id of its first item (its only one when nitems == 1)
  int32_t items_begin = 0;  // into Engine::unit_items_, when nitems >= 2
  int32_t nitems = 0;
  int32_t q[2] = {-1, -1};  // its queues when nq <= 2, else q[0]: where they start in Engine::unit_queues_
  int32_t nq = 0;
  int32_t pending = 0;      // items not complete
  int32_t at_head = 0;      // queues whose head it is (runnable when == nq and issued)
  bool barrier = false;     // stream_wait_event: waits until a marker (Engine::barrier_markers_)
  bool issued = false;
  bool active = false;
  bool done = false;
};
static_assert(sizeof(Unit) == 40, "Unit is the engine's per-op memory");

struct Queue {
  enum Kind : uint8_t { kStream, kComm, kDevice } kind = kStream;
  int32_t proc = 0;
  int32_t key = 0;  // stream index or comm index
  std::vector<int32_t> units;
  int32_t head = 0;
  int32_t waiters = -1;  // index into Engine::waiters_ once something waits on this queue
};

struct Marker {
  int32_t q;
  int32_t pos;
};

// inst_slots_ values besides a global item id.
constexpr int32_t kNeverIssued = -1;
constexpr int32_t kRetired = -2;  // the member's trace retired it (size cap): reached

struct Instance {
  int32_t comm = 0;
  int64_t ordinal = 0;  // 0-based absolute collective ordinal on the communicator
  int32_t arrived = 0;
  int32_t slots = 0;  // into Engine::inst_slots, nranks entries (global item ids, -1 = never issued)
  bool mismatch = false;
};

struct HostThread {
  int32_t proc = 0;
  std::vector<int32_t> steps;  // >= 0: issue unit; < 0: wait, global item id -(s+1)
  int32_t cursor = 0;
};

class Engine {
 public:
  Engine(const WorkList& s, bool serialized) : s_(s), serialized_(serialized) { build(); }
  // Built in the arrays of an engine that is done with (left empty): their pages are already
  // mapped, and first-touch page faults are a third of building an engine.
  Engine(const WorkList& s, bool serialized, Engine&& used) : s_(s), serialized_(serialized) {
    recycle(std::move(used));
    build();
  }
  void run(uint64_t shuffle_seed);
  Result witness(Verdict stuck_verdict) const;
  bool all_done() const { return done_units_ == static_cast<int64_t>(units_.size()); }
  int64_t op_items() const { return op_items_; }
  int64_t completed_op_items() const { return completed_op_items_; }

 private:
  // Building the queues, units and matching tables (build() and its steps).
  struct Matching;
  struct OpenGroup;
  struct ProcBuild;
  void build();
  void recycle(Engine&& used);
  void allocate_items();
  void build_proc(int32_t proc, Matching& m);
  void add_host_item(ProcBuild& b, int32_t gitem, const Item& it);
  int32_t place_op(ProcBuild& b, int32_t gitem, const Item& it);
  void add_p2p_parts(Matching& m, int32_t proc, int32_t gitem, const Item& it);
  void join_collective(Matching& m, ProcBuild& b, int32_t gitem, const Item& it);
  void pair_channels(const Matching& m);
  int32_t new_queue(int32_t proc, Queue::Kind kind, int32_t key);
  int32_t stream_queue(ProcBuild& b, int32_t stream);
  int32_t comm_queue(ProcBuild& b, int32_t comm);
  int32_t device_size(const ProcBuild& b) const;
  int32_t new_unit(const ProcBuild& b, int32_t gitem, int32_t thread);
  void finish_unit(int32_t unit, const int32_t* items, int32_t nitems, const int32_t* qs, int32_t nq);
  void close_group(ProcBuild& b, int32_t thread);
  int64_t retired(int32_t proc, size_t comm) const;  // collectives the proc's trace retired on comm
  void advance(int32_t thread);
  void try_activate(int32_t unit);
  void arrive(int32_t gitem);
  bool parts_matched(int32_t gitem) const;  // every send and recv of a p2p op met its peer's
  void complete_item(int32_t gitem);
  void complete_unit(int32_t unit);
  bool marker_ok(const Marker& m) const { return queues_[m.q].head >= m.pos; }
  void add_waiter(const Marker& m, int32_t waiter) {
    Queue& q = queues_[m.q];
    if (q.waiters < 0) {
      q.waiters = static_cast<int32_t>(waiters_.size());
      waiters_.emplace_back();
    }
    waiters_[q.waiters].emplace(m.pos, waiter);
  }
  bool same_collective(const Item& a, const Item& b) const;
  bool members_agree(const Instance& in) const;  // among the members that issue it

  // Explanations (only after run()).
  std::string item_desc(int32_t gitem) const;
  std::string unit_desc(int32_t unit) const;
  std::string wait_desc(int32_t gitem) const;
  std::string queue_desc(int32_t q) const;
  // Why `unit` cannot progress: text, and the unit it waits on (-1: none / not a unit).
  struct Why {
    std::string text;
    int32_t unit = -1;  // the unit it waits on, -1: none
    int32_t proc = -1;  // the rank it waits on when that rank never issues the op, else -1
    bool missing = false;  // it waits on a communicator member with no trace file: unknown
  };
  // explain = false: only the unit and rank it waits on, no text (the cycle search asks it of
  // every stuck unit: 1.5 M at 16,384 ranks).
  Why why(int32_t unit, bool explain = true) const;
  // members_agree of insts_[inst], computed once: it depends only on the slots build() filled.
  bool agrees(int32_t inst) const;
  // "comm X seq N: rank 0 at a, rank 1 at b"; with exclude_proc, only the other members.
  std::string instance_summary(const Instance& in, int32_t exclude_proc = -1) const;

  int32_t unit_proc(int32_t u) const { return item_proc_[units_[u].first_item]; }
  int32_t unit_item(const Unit& un, int32_t k) const { return un.nitems == 1 ? un.first_item : unit_items_[un.items_begin + k]; }
  int32_t unit_queue(const Unit& un, int32_t k) const { return un.nq <= 2 ? un.q[k] : unit_queues_[un.q[0] + k]; }
  const Item& item(int32_t g) const { return s_.procs[item_proc_[g]].items[g - item_base_[item_proc_[g]]]; }
  // The op of an item (Schedule::procs[p].ops index), -1 for a host wait.
  int32_t op_index(int32_t g) const { return item(g).kind == ItemKind::kOp ? item(g).op_index : -1; }
  const std::string& plabel(int32_t proc) const { return s_.procs[proc].label; }
  // A peer whose schedule ends short of what it did (ProcWork::end_unknown: a hole in its
  // records, or the job's end stopping it in host code) or a member with no trace file (proc
  // -1): the clause saying that what it did about `next` is unknown ("issued", "posted"), ""
  // when its schedule is whole.
  std::string unknown_past_end(int32_t proc, const std::string& next, const char* done) const {
    if (proc < 0) return std::string(": what it ") + done + " is unknown";  // a member with no trace file
    const ProcWork& p = s_.procs[proc];
    if (p.hole) return ", whose records stop at a hole before " + next + ": what it " + done + " there is unknown";
    if (p.stopped)
      return ", which the job's end stopped in host code before " + next + ": whether it would have " + done + " it is unknown";
    if (p.live) return ", which is still running and has not " + std::string(done) + " " + next + " yet";
    return "";
  }
  std::string member_label(int32_t comm, int32_t crank) const {
    int32_t p = s_.comms[comm].members[crank];
    return p >= 0 ? plabel(p) : "comm rank " + std::to_string(crank) + " (no trace file)";
  }

  const WorkList& s_;
  bool serialized_;
  std::vector<int32_t> item_base_;   // per proc: global id of its first item
  OpArray<int32_t> item_proc_;   // per global item
  OpArray<int32_t> item_unit_;   // per global item (-1 for host waits / event records)
  OpArray<int32_t> item_inst_;   // collective instance, -1 otherwise
  std::vector<std::vector<Marker>> wait_markers_;  // per global item (host waits only), sparse
  std::unordered_map<int32_t, int32_t> wait_marker_idx_;
  std::vector<int32_t> part_base_;   // per proc: global id of its first part
  OpArray<int32_t> part_item_;
  OpArray<int32_t> part_partner_;
  OpArray<uint8_t> part_state_;  // 0 waiting, 1 arrived, 2 matched, 3 mismatched
  OpArray<Unit> units_;
  OpArray<int32_t> unit_items_;   // the items of units of two or more
  OpArray<int32_t> unit_queues_;  // the queues of units on three or more
  std::unordered_map<int32_t, Marker> barrier_markers_;  // per barrier unit: the queue position it waits for
  std::vector<Queue> queues_;
  // Per queue with waiters: (position needed, waiter), smallest first; waiter >= 0 is a unit
  // (a stream_wait_event barrier), < 0 a host thread -(w+1).
  std::vector<std::priority_queue<std::pair<int32_t, int32_t>, std::vector<std::pair<int32_t, int32_t>>, std::greater<>>>
      waiters_;
  OpArray<Instance> insts_;
  OpArray<int32_t> inst_slots_;
  std::vector<HostThread> threads_;
  std::vector<int32_t> thread_base_;  // per proc: its first host thread in threads_ (+ one past the last)
  mutable std::vector<int32_t> inst_block_;  // per instance: its first member not there (why(); after run())
  mutable std::vector<int8_t> agree_;  // per instance: 0 not computed, 1 agree, 2 not (agrees())
  std::vector<int32_t> work_units_, work_threads_;
  int64_t done_units_ = 0, op_items_ = 0, completed_op_items_ = 0;
};

}  // namespace lockstep::model::detail
