// The canonical cross-rank signature of an op and the running digest of a communicator's
// collective sequence, defined once: the recorder writes digest checkpoints with it, the analyzer
// recomputes it over the ops a trace still holds and compares checkpoints across members. Two
// members whose digests agree at collective ordinal k issued the same first k collectives (up to
// a 64-bit hash collision); the first checkpoint where they differ bounds the first divergence.
//
// What enters the signature is exactly what the analyzer requires to be equal across members:
//  - a collective (every op that is not point-to-point, coalesced groups included): op, dtype,
//    count, root, peer, redop and every part, in issue order;
//  - an all-to-all: op and dtype only (per-peer counts legitimately differ between members and
//    are checked pairwise, not by equality);
//  - point-to-point ops (send, recv, send_recv) are not in the collective sequence at all.
// Only sequenced ops (those that enqueued work: enqueued or graph_launched) are digested, in
// sequence order. Changing any of this changes the trace format: bump kDigestVersion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "vocab.h"

namespace lockstep::digest {

inline constexpr int kDigestVersion = 1;          // meta 'digest_version'
inline constexpr int64_t kDefaultInterval = 1024; // collectives between checkpoints
inline constexpr uint64_t kEmpty = 0;             // digest of an empty sequence

// One NCCL call inside a grouped op.
struct Part {
  vocab::Op op;
  vocab::Dtype dtype;
  int64_t count;
  int32_t root;  // -1 = none
  int32_t peer;  // -1 = none
  vocab::RedOp redop;
};

// Whether an op takes part in its communicator's collective sequence (and so in the digest).
constexpr bool in_collective_sequence(vocab::Op op) { return !vocab::is_p2p(op); }

namespace detail {
class Bytes {
 public:
  void u8(uint8_t v) { put(&v, 1); }
  void i32(int32_t v) { put(&v, 4); }  // x86-64 and aarch64 are little-endian: bytes as stored
  void i64(int64_t v) { put(&v, 8); }
  void u64(uint64_t v) { put(&v, 8); }
  XXH64_hash_t finish() const { return XXH64(buf_, n_, 0); }
  bool overflow() const { return overflow_; }

 private:
  void put(const void* p, size_t k) {
    if (n_ + k > sizeof(buf_)) { overflow_ = true; return; }
    std::memcpy(buf_ + n_, p, k);
    n_ += k;
  }
  unsigned char buf_[64];
  size_t n_ = 0;
  bool overflow_ = false;
};
}  // namespace detail

// Hash of the signature (see the header comment for what enters it). Parts are folded in one at
// a time, so any number of parts hashes in constant memory.
inline uint64_t signature_hash(vocab::Op op, vocab::Dtype dtype, int64_t count, int32_t root,
                               int32_t peer, vocab::RedOp redop, const Part* parts, size_t nparts) {
  detail::Bytes b;
  b.u8(static_cast<uint8_t>(op));
  b.u8(static_cast<uint8_t>(dtype));
  if (op == vocab::Op::AllToAll) return b.finish();
  b.i64(count);
  b.i32(root);
  b.i32(peer);
  b.u8(static_cast<uint8_t>(redop));
  b.i64(static_cast<int64_t>(nparts));
  uint64_t h = b.finish();
  for (size_t i = 0; i < nparts; ++i) {
    detail::Bytes p;
    p.u64(h);
    p.u8(static_cast<uint8_t>(parts[i].op));
    p.u8(static_cast<uint8_t>(parts[i].dtype));
    p.i64(parts[i].count);
    p.i32(parts[i].root);
    p.i32(parts[i].peer);
    p.u8(static_cast<uint8_t>(parts[i].redop));
    h = p.finish();
  }
  return h;
}

// The digest after one more collective: digest_k = chain(digest_{k-1}, signature_hash(op_k)),
// digest_0 = kEmpty. Order-sensitive.
inline uint64_t chain(uint64_t digest, uint64_t sig_hash) {
  detail::Bytes b;
  b.u64(digest);
  b.u64(sig_hash);
  return b.finish();
}

// The order digest of a process: its collectives of every communicator, in call_index order,
// chained by the id of their communicator in its trace file (comms.id):
// order_0 = kEmpty, order_n = order_step(order_{n-1}, comm_id of collective n). Written with each
// communicator's checkpoint (checkpoints.order_count = n, order_digest) when the recorder saw
// every collective up to it in call_index order. Two processes whose files give the same
// communicators the same ids and whose order digests agree after n collectives issued their
// first n collectives in the same order across communicators (up to a 64-bit collision): no
// order inversion among them (analyzer/inversion.cpp) hides before that point.
inline uint64_t order_step(uint64_t order_digest, int64_t comm_id) {
  detail::Bytes b;
  b.u64(order_digest);
  b.i64(comm_id);
  b.u8(0x6f);  // 'o': not a chain() of the same two words
  return b.finish();
}

// A checkpoint is written after collective ordinal k (1-based) when k % interval == 0.
constexpr bool is_checkpoint(int64_t ordinal, int64_t interval) {
  return interval > 0 && ordinal > 0 && ordinal % interval == 0;
}

}  // namespace lockstep::digest
