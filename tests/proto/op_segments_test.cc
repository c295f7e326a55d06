// OpSegments: requests of one connection counted off against the operations NCCL's profiler
// announced for it (plugin/op_segments.h).
#include "op_segments.h"

#include <gtest/gtest.h>

namespace crystal::plugin {
namespace {

TEST(OpSegments, RequestsTakeTheirPlaceInAnnouncedOperationsInOrder) {
  OpSegments ops;
  ops.push(7, 2, false);  // a tree operation: 2 transfers
  ops.push(9, 3, true);   // then a ring one: 3
  EXPECT_EQ(ops.pending(), 2u);
  auto a = ops.next(), b = ops.next(), c = ops.next(), d = ops.next(), e = ops.next();
  ASSERT_TRUE(a && b && c && d && e);
  EXPECT_EQ(a->op, 7u);
  EXPECT_EQ(a->index, 0u);
  EXPECT_FALSE(a->ring);
  EXPECT_EQ(b->op, 7u);
  EXPECT_EQ(b->index, 1u);
  EXPECT_EQ(c->op, 9u);
  EXPECT_EQ(c->index, 0u);
  EXPECT_TRUE(c->ring);
  EXPECT_EQ(e->op, 9u);
  EXPECT_EQ(e->index, 2u);
  EXPECT_EQ(ops.pending(), 0u);
  EXPECT_FALSE(ops.next()) << "more requests than announced: no place";
}

TEST(OpSegments, NothingAnnouncedOrEmptyOperationsGiveNoPlace) {
  OpSegments ops;
  EXPECT_FALSE(ops.next());
  ops.push(3, 0, true);  // an operation without transfers on this connection
  EXPECT_EQ(ops.pending(), 0u);
  EXPECT_FALSE(ops.next());
  EXPECT_EQ(ops.unplaced(), 2u);
  ops.push(4, 1, true);
  const auto p = ops.next();
  ASSERT_TRUE(p);
  EXPECT_EQ(p->op, 4u);
}

// Broadcasts and reduces (NCCL's profiler gave the root): the real rank's place in the chain
// from its head, and the bytes of one transfer (the collective's per channel and transfer,
// at most NCCL's chunk).
TEST(OpSegments, ChainOperationsSayTheHopsFromTheirHead) {
  OpSegments ops(64, 5);
  ops.push(1, 1, true, false, false, 16, {0, false, 1024, 524288, 777});   // broadcast from 0
  ops.push(2, 8, true, false, false, 16, {0, true, 64ULL << 20, 524288});  // reduce to 0
  ops.push(3, 2, true, false, false, 16, {5, false, 1 << 20, 524288});     // R is the root
  ops.push(4, 2, true, false, false, 16, {62, true, 1 << 20, 524288});     // head 63: 6 hops
  ops.push(5, 2, true);                                                    // an all-reduce
  ops.push(6, 2, false, false, false, 16, {0, false, 1 << 20, 524288});    // not a ring's
  const auto b = ops.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->chain_hops, 5);
  EXPECT_EQ(b->chain_unit_bytes, 64u) << "1 KiB over 16 channels, one transfer each";
  EXPECT_EQ(b->chain_issued_ns, 777);
  EXPECT_EQ(b->transfers, 1u) << "the operation's transfers on the connection";
  EXPECT_FALSE(b->chain_reduce);
  std::optional<OpSegments::Place> r;
  for (int i = 0; i < 8; ++i) r = ops.next();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->chain_hops, 4) << "a reduce's head is the rank after its root";
  EXPECT_EQ(r->chain_unit_bytes, 524288u) << "4 MiB a channel in 8 transfers: a chunk each";
  EXPECT_EQ(r->transfers, 8u);
  EXPECT_EQ(r->index, 7u);
  EXPECT_TRUE(r->chain_reduce) << "its members run the reduce's kernel";
  const auto own = ops.next();
  (void)ops.next();
  ASSERT_TRUE(own);
  EXPECT_EQ(own->chain_hops, 0);
  const auto wrap = ops.next();
  (void)ops.next();
  ASSERT_TRUE(wrap);
  EXPECT_EQ(wrap->chain_hops, 6);
  const auto ar = ops.next();
  (void)ops.next();
  ASSERT_TRUE(ar);
  EXPECT_EQ(ar->chain_hops, -1);
  EXPECT_FALSE(ar->chain_reduce);
  const auto tree = ops.next();
  ASSERT_TRUE(tree);
  EXPECT_EQ(tree->chain_hops, -1);
  // Ranks unknown: no chain.
  OpSegments unknown;
  unknown.push(1, 1, true, false, false, 16, {0, false, 1024, 524288});
  EXPECT_EQ(unknown.next()->chain_hops, -1);
}

}  // namespace
}  // namespace crystal::plugin
