// The trace's identity rules, defined once: what a communicator is called across ranks and runs
// (its role), which communicators a `--comm` selector names, how a report shows a rank, how
// point-to-point messages pair up (their channel), and a communicator's last op. The analyzer,
// the model checker, replay and the CLI all use these; none derives its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace_model.h"

namespace lockstep {

// ---- Communicator roles ---------------------------------------------------------------------
// A communicator's role is the same on every member and in every run of the job (comm hashes
// are random per run), so baselines and `--order-from` can name it:
//  - ncclConfig_t.commName when given;
//  - else "init<i>" for the i-th communicator the process created from a unique id (InitRank*,
//    InitAll), 0-based;
//  - else "<parent role>.split<j>(color=c)" for the communicator created by the j-th
//    ncclCommSplit/Shrink call on the parent. NCCL_SPLIT_NOCOLOR calls count: every member of
//    the parent makes the j-th split call, whether or not it joins a new communicator, so a rank
//    that sat one split out numbers the next one like its peers do;
//  - "(created before tracing)" for one the recorder first saw in use.
std::vector<std::string> comm_roles(const Process& p);
// The structure only, "init<i>.split<j>" (no commName, no color): the same on every rank that
// plays the same part in different communicators (tensor-parallel group 0 vs group 1), for
// `replay --order-from`.
std::vector<std::string> structural_comm_roles(const Process& p);

// Each communicator's family: its role without split colors ("init0.split0(color=3)" ->
// "init0.split0"; a commName stays as it is), built from the creation structure, never by editing
// the role's text. The same for the 32 tensor-parallel groups of a job, so hang summaries group
// them into one line; a --comm selector accepts it too (every communicator of the family).
std::vector<std::string> comm_families(const Process& p);

// "3f2a9c01" (the first 8 hex digits), the short form used in reports and accepted by --comm.
std::string short_hash(const std::string& hash);

// ---- Communicator labels --------------------------------------------------------------------
// How every text output names a communicator (analyze, stacks, ops, timeline, replay): "comm
// 3f2a9c01 (init0.split0(color=1))", the short hash then the role, each of which --comm accepts;
// "comm 3f2a9c01" when the role is not known. JSON keeps the full hash and the role as fields.
std::string comm_label(const std::string& hash, const std::string& role = "");
// The bare name a generated program or a model witness gives a communicator: its commName, else
// the short hash.
std::string comm_short_name(const std::string& hash, const std::string& name);
// Several communicators of one family named at once (hang summaries that group the 32
// tensor-parallel groups): "comm init0.split0 (one of 32 communicators of that family)".
std::string comm_family_label(const std::string& family, size_t communicators);

// ---- --comm selectors -----------------------------------------------------------------------
// A selector names a communicator by its role, its commName, its family (comm_families: what the
// hang summaries print), or a prefix of its hash. An exact role or name beats a family, which
// beats a hash prefix (a role "init0" must not also select hashes starting "init0").
enum class CommMatch { kNone, kHashPrefix, kFamily, kExact };
CommMatch match_comm(const std::string& selector, const std::string& hash, const std::string& role,
                     const std::string& family, const std::string& name);
// Indices of the candidates the selector names: the exact matches when there are any, else the
// family's, else the hash-prefix matches. `role_of(i)`/`family_of(i)`/`comm_of(i)` give
// candidate i's role, family and Comm.
template <class RoleOf, class FamilyOf, class CommOf>
std::vector<int> select_comms(const std::string& selector, int n, RoleOf role_of, FamilyOf family_of, CommOf comm_of) {
  std::vector<int> exact, family, prefix;
  for (int i = 0; i < n; ++i) {
    const auto& c = comm_of(i);
    switch (match_comm(selector, c.hash, role_of(i), family_of(i), c.name)) {
      case CommMatch::kExact: exact.push_back(i); break;
      case CommMatch::kFamily: family.push_back(i); break;
      case CommMatch::kHashPrefix: prefix.push_back(i); break;
      case CommMatch::kNone: break;
    }
  }
  return !exact.empty() ? exact : !family.empty() ? family : prefix;
}

// ---- Rank labels ----------------------------------------------------------------------------
// The rank a report shows for a process: its global rank, else its position among the loaded
// processes (`index`).
inline int shown_rank(const Process& p, int index) { return p.global_rank >= 0 ? p.global_rank : index; }
// "rank 3": shown_rank with its noun (for lines that name a process by position when its global
// rank is unknown).
inline std::string shown_rank_label(const Process& p, int index) { return "rank " + std::to_string(shown_rank(p, index)); }
// "rank 3", or "process 2" when the global rank is unknown: rank_label without the file's words.
inline std::string rank_or_process(const Process& p, int index) {
  return p.global_rank >= 0 ? "rank " + std::to_string(p.global_rank) : "process " + std::to_string(index);
}
// "0-3,7,9-12" (sorted, duplicates dropped); past `max_segments` segments "0-3,7,... (+N more)".
inline constexpr size_t kMaxRangeSegments = 16;  // what a line of text lists
std::string rank_ranges(std::vector<int> ranks, size_t max_segments = SIZE_MAX);
// "rank 3", "ranks 0-3,7" (`noun` "comm rank": "comm ranks 1-2"): rank_ranges with its noun.
std::string ranks_phrase(std::vector<int> ranks, const std::string& noun = "rank", size_t max_segments = SIZE_MAX);
// rank_ranges read back, one item at a time ("0-7", "9"; a command line's comma-separated list),
// appended to `out`. false, and why: not a rank, a range backwards, or more than 2^20 ranks.
bool parse_rank_ranges(const std::vector<std::string>& items, std::vector<int>& out, std::string& why);
// A process by what its file says: "vm pid 2981"; only what is known (a Flight Recorder dump gives
// no host and no pid: "file nccl_trace_rank_0").
std::string process_label(const Process& p);
// "rank 3"; when the global rank is unknown or not unique: "process 2 (vm pid 2981)".
std::string rank_label(const Process& p, int index, bool rank_unique = true);

// ---- Op progress ----------------------------------------------------------------------------
// The one word every text output gives an op's progress (analyze, stacks, ops, timeline's
// legend): "completed"; "in flight" (enqueued on the GPU, no completion recorded); "issued" when
// the process recorded no completion at all, so "in flight" would be a guess; else the state's
// own name (vocab.h: "captured", "failed", "simulated"). JSON keeps the state and the flag.
inline const char* progress_word(vocab::State state, bool completed, bool completion_known = true) {
  if (!vocab::enqueued_work(state)) return vocab::name(state);
  if (completed) return "completed";
  return completion_known ? "in flight" : "issued";
}

// "1 rank", "2 ranks": every count a sentence gives.
template <class N>
std::string plural(N n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// ---- Point-to-point channels ----------------------------------------------------------------
// NCCL matches sends and receives in issue order per (communicator, sender, receiver): the n-th
// send from s to d on a communicator meets the n-th receive on d from s.
struct P2PChannel {
  int32_t comm = -1;  // any communicator index the caller uses consistently
  int32_t src = -1;   // rank in the communicator
  int32_t dst = -1;
  bool operator==(const P2PChannel&) const = default;
  bool operator<(const P2PChannel& o) const {
    return comm != o.comm ? comm < o.comm : src != o.src ? src < o.src : dst < o.dst;
  }
  // One integer per channel (comm < 2^24, ranks < 2^20).
  uint64_t key() const {
    return (static_cast<uint64_t>(comm) << 40) | (static_cast<uint64_t>(src) << 20) | static_cast<uint64_t>(dst);
  }
};
// The channel of one message: `me` sends to (or receives from) `peer`.
inline P2PChannel p2p_channel(int32_t comm, int32_t me, int32_t peer, bool is_send) {
  return is_send ? P2PChannel{comm, me, peer} : P2PChannel{comm, peer, me};
}

// ---- The last op of a communicator ----------------------------------------------------------
// A process's last op on a communicator, from the indices (in call order) of its collectives and
// of its point-to-point ops on it (comm_index.h ProcComm::colls / p2p): -1 when it issued none.
inline int64_t last_op_on_comm(const std::vector<uint32_t>& colls, const std::vector<uint32_t>& p2p) {
  int64_t last = -1;
  if (!colls.empty()) last = colls.back();
  if (!p2p.empty() && static_cast<int64_t>(p2p.back()) > last) last = p2p.back();
  return last;
}

}  // namespace lockstep
