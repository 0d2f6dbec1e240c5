#include "vocab.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace lockstep::vocab {
namespace {

// Every table round-trips name -> enum -> name, names are unique, and unknown names are refused.
template <typename E, size_t N, typename Parse>
void expect_round_trip(const char* const (&names)[N], Parse parse) {
  std::set<std::string> seen;
  for (size_t i = 0; i < N; ++i) {
    EXPECT_TRUE(seen.insert(names[i]).second) << names[i];
    auto e = parse(names[i]);
    ASSERT_TRUE(e.has_value()) << names[i];
    EXPECT_EQ(static_cast<size_t>(*e), i);
    EXPECT_STREQ(name(*e), names[i]);
  }
  EXPECT_FALSE(parse("").has_value());
  EXPECT_FALSE(parse("ALL_REDUCE").has_value());
  EXPECT_FALSE(parse(std::string(names[0]) + " ").has_value());
}

TEST(Vocab, EveryTableRoundTrips) {
  expect_round_trip<Op>(kOpNames, parse_op);
  expect_round_trip<State>(kStateNames, parse_state);
  expect_round_trip<Dtype>(kDtypeNames, parse_dtype);
  expect_round_trip<RedOp>(kRedOpNames, parse_redop);
  expect_round_trip<Wait>(kWaitNames, parse_wait);
  expect_round_trip<FrameKind>(kFrameKindNames, parse_frame_kind);
  expect_round_trip<CommEnd>(kCommEndNames, parse_comm_end);
}

TEST(Vocab, NcclValuesMapToTheirNames) {
  EXPECT_STREQ(name(dtype_from_nccl(9)), "bfloat16");  // ncclBfloat16
  EXPECT_EQ(dtype_from_nccl(12), Dtype::Mixed);
  EXPECT_EQ(dtype_from_nccl(-1), Dtype::Mixed);
  EXPECT_EQ(dtype_size(Dtype::Bfloat16), 2);
  EXPECT_EQ(dtype_size(Dtype::Float64), 8);
  EXPECT_EQ(redop_from_nccl(4), RedOp::Avg);
  EXPECT_EQ(redop_from_nccl(7), RedOp::PreMulSum);  // user-created ops
  EXPECT_EQ(redop_from_nccl(-1), RedOp::None);
  EXPECT_TRUE(is_p2p(Op::SendRecv));
  EXPECT_FALSE(is_p2p(Op::AllToAll));
  EXPECT_TRUE(enqueued_work(State::GraphLaunched));
  EXPECT_FALSE(enqueued_work(State::Captured));
}

}  // namespace
}  // namespace lockstep::vocab
