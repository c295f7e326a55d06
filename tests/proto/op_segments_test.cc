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

}  // namespace
}  // namespace crystal::plugin
