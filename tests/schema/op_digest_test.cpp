#include "op_digest.h"

#include <gtest/gtest.h>

#include <set>

namespace lockstep::digest {
namespace {
using vocab::Dtype;
using vocab::Op;
using vocab::RedOp;

uint64_t h(Op op, Dtype dt, int64_t count, int root = -1, RedOp r = RedOp::Sum, const Part* parts = nullptr,
           size_t n = 0) {
  return signature_hash(op, dt, count, root, -1, r, parts, n);
}

TEST(OpDigest, EveryComparedFieldChangesTheSignature) {
  Part p{Op::AllReduce, Dtype::Float32, 8, -1, -1, RedOp::Sum};
  Part q = p;
  q.count = 9;
  std::set<uint64_t> all = {
      h(Op::AllReduce, Dtype::Float32, 1024),           h(Op::Broadcast, Dtype::Float32, 1024, 0, RedOp::None),
      h(Op::AllReduce, Dtype::Bfloat16, 1024),          h(Op::AllReduce, Dtype::Float32, 1025),
      h(Op::AllReduce, Dtype::Float32, 1024, -1, RedOp::Max),
      h(Op::Broadcast, Dtype::Float32, 1024, 1, RedOp::None),
      h(Op::Coalesced, Dtype::Float32, 8, -1, RedOp::None, &p, 1),
      h(Op::Coalesced, Dtype::Float32, 8, -1, RedOp::None, &q, 1),
  };
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(h(Op::AllReduce, Dtype::Float32, 1024), h(Op::AllReduce, Dtype::Float32, 1024));
}

TEST(OpDigest, AllToAllSignatureIgnoresPerPeerCounts) {
  Part a{Op::Send, Dtype::Float32, 8, -1, 1, RedOp::None};
  Part b{Op::Send, Dtype::Float32, 16, -1, 0, RedOp::None};
  EXPECT_EQ(h(Op::AllToAll, Dtype::Float32, 8, -1, RedOp::None, &a, 1),
            h(Op::AllToAll, Dtype::Float32, 16, -1, RedOp::None, &b, 1));
  EXPECT_NE(h(Op::AllToAll, Dtype::Float32, 8), h(Op::AllToAll, Dtype::Float16, 8));
  EXPECT_FALSE(in_collective_sequence(Op::Send));
  EXPECT_FALSE(in_collective_sequence(Op::SendRecv));
  EXPECT_TRUE(in_collective_sequence(Op::AllToAll));
  EXPECT_TRUE(in_collective_sequence(Op::Coalesced));
}

TEST(OpDigest, ChainIsOrderSensitive) {
  uint64_t x = h(Op::AllReduce, Dtype::Float32, 1), y = h(Op::AllGather, Dtype::Float32, 1);
  EXPECT_NE(chain(chain(kEmpty, x), y), chain(chain(kEmpty, y), x));
  EXPECT_EQ(chain(chain(kEmpty, x), y), chain(chain(kEmpty, x), y));
  EXPECT_NE(chain(kEmpty, x), x);
}

// The digest is part of the trace format: a trace written by another build must verify here.
TEST(OpDigest, FormatIsStable) {
  uint64_t d = kEmpty;
  for (int i = 0; i < 3; ++i) d = chain(d, h(Op::AllReduce, Dtype::Float32, 1024));
  EXPECT_EQ(d, 0xcb02c4e5f46d3be5ull) << std::hex << d;  // bump kDigestVersion if this changes
}

TEST(OpDigest, CheckpointOrdinals) {
  EXPECT_FALSE(is_checkpoint(0, 4));
  EXPECT_TRUE(is_checkpoint(4, 4));
  EXPECT_FALSE(is_checkpoint(5, 4));
  EXPECT_FALSE(is_checkpoint(4, 0));
}

}  // namespace
}  // namespace lockstep::digest
