// fold_parts(): how a group's calls on one communicator become one logical op.
#include <gtest/gtest.h>

#include <vector>

#include "group_fold.h"

using namespace lockstep::rec;

namespace {
OpDesc p2p(OpKind k, int peer, size_t n) { return {k, 7, n, -1, peer, -1, nullptr, nullptr}; }
OpDesc coll(OpKind k, size_t n, int dt = 7) { return {k, dt, n, -1, -1, 0, nullptr, nullptr}; }
Folded fold(const std::vector<OpDesc>& v, int nranks, int rank) {
  std::vector<const OpDesc*> ptrs;
  for (auto& d : v) ptrs.push_back(&d);
  return fold_parts(ptrs.data(), ptrs.size(), nranks, rank);
}
}  // namespace

TEST(GroupFold, single_call_stays_itself_without_parts) {
  Folded f = fold({p2p(OpKind::Send, 3, 9)}, 4, 0);
  EXPECT_EQ(f.op, OpKind::Send);
  EXPECT_EQ(f.peer, 3);
  EXPECT_EQ(f.count, 9);
  EXPECT_FALSE(f.list_parts);
}

TEST(GroupFold, send_and_recv_with_every_peer_without_self_is_all_to_all) {
  std::vector<OpDesc> v;
  for (int p : {1, 2, 3}) v.push_back(p2p(OpKind::Send, p, size_t(p))), v.push_back(p2p(OpKind::Recv, p, 5));
  Folded f = fold(v, 4, 0);
  EXPECT_EQ(op_name(f.op), std::string("all_to_all"));
  EXPECT_EQ(f.count, 1 + 2 + 3) << "total elements sent";
  EXPECT_TRUE(f.list_parts);
}

TEST(GroupFold, missing_receive_from_one_peer_is_send_recv) {
  std::vector<OpDesc> v;
  for (int p : {0, 1, 2, 3}) v.push_back(p2p(OpKind::Send, p, 1));
  for (int p : {0, 1, 2}) v.push_back(p2p(OpKind::Recv, p, 1));
  EXPECT_EQ(op_name(fold(v, 4, 0).op), std::string("send_recv"));
}

TEST(GroupFold, self_send_without_self_recv_is_not_all_to_all) {
  std::vector<OpDesc> v = {p2p(OpKind::Send, 0, 1), p2p(OpKind::Send, 1, 1),
                           p2p(OpKind::Recv, 1, 1)};
  EXPECT_EQ(op_name(fold(v, 2, 0).op), std::string("send_recv"));
}

TEST(GroupFold, fewest_parts_of_an_all_to_all_still_fold_to_it) {
  // 2 * (nranks - 1) parts: the least an all_to_all needs (the count check before the bitmap)
  EXPECT_EQ(op_name(fold({p2p(OpKind::Send, 1, 1), p2p(OpKind::Recv, 1, 1)}, 2, 0).op),
            std::string("all_to_all"));
  std::vector<OpDesc> v;
  for (int p = 0; p < 1100; p++)
    if (p != 5) v.push_back(p2p(OpKind::Send, p, 1)), v.push_back(p2p(OpKind::Recv, p, 1));
  EXPECT_EQ(op_name(fold(v, 1100, 5).op), std::string("all_to_all")) << "over 1,024 ranks";
  v.resize(v.size() - 1);
  EXPECT_EQ(op_name(fold(v, 1100, 5).op), std::string("send_recv"));
}

TEST(GroupFold, pipeline_pair_on_a_large_communicator_is_send_recv) {
  for (int nranks : {3, 8, 1024, 4096})
    EXPECT_EQ(op_name(fold({p2p(OpKind::Send, 1, 4), p2p(OpKind::Recv, 2, 4)}, nranks, 0).op),
              std::string("send_recv"))
        << nranks;
}

TEST(GroupFold, unknown_communicator_size_never_infers_all_to_all) {
  std::vector<OpDesc> v = {p2p(OpKind::Send, 1, 1), p2p(OpKind::Recv, 1, 1)};
  EXPECT_EQ(op_name(fold(v, -1, 0).op), std::string("send_recv"));
}

TEST(GroupFold, several_collectives_are_coalesced_with_mixed_dtype_null) {
  Folded f = fold({coll(OpKind::AllReduce, 4, 7), coll(OpKind::AllReduce, 6, 9)}, 2, 0);
  EXPECT_EQ(op_name(f.op), std::string("coalesced"));
  EXPECT_EQ(f.dtype, -1);
  EXPECT_EQ(f.count, 10);
  EXPECT_TRUE(f.list_parts);
}

TEST(GroupFold, collective_mixed_with_p2p_is_coalesced) {
  Folded f = fold({coll(OpKind::AllReduce, 4), p2p(OpKind::Send, 1, 2)}, 2, 0);
  EXPECT_EQ(op_name(f.op), std::string("coalesced"));
}
