// Layout -> communicators against hand-computed member lists.
#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "graph/comm_table.h"

namespace crystal::graph {
namespace {

std::vector<int> membersOf(const CommTable& t, std::string_view family, int rank) {
  const int c = t.commOf(family, rank);
  std::vector<int> m;
  if (c < 0) return m;
  for (int i = 0; i < t.info(c).size; ++i) m.push_back(t.member(c, i));
  return m;
}

LayoutConfig layout(int tp, int cp, int ep, int dp, int pp, std::string order = "tp-cp-ep-dp-pp") {
  LayoutConfig l;
  l.tp = tp, l.cp = cp, l.ep = ep, l.dp = dp, l.pp = pp, l.order = std::move(order);
  return l;
}

TEST(Layout, Tp2Pp2Dp4World16) {
  // Megatron order: rank = tp + 2*dp + 8*pp.
  const LayoutCommTable t(Layout(layout(2, 1, 1, 4, 2), 16), {});
  EXPECT_EQ(t.count(), 1 + 8 + 4 + 8);  // world, 8 tp, 4 dp, 8 pp
  EXPECT_EQ(membersOf(t, "tp", 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(membersOf(t, "dp", 0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(membersOf(t, "dp", 9), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(membersOf(t, "pp", 3), (std::vector<int>{3, 11}));
  EXPECT_EQ(membersOf(t, "world", 7).size(), 16u);
  EXPECT_EQ(membersOf(t, "ep", 0), std::vector<int>{});  // ep = 1: no family
  EXPECT_EQ(t.commOf("world", 12), 0);
  EXPECT_EQ(t.commOf("tp", 0), 1);
  EXPECT_EQ(t.commOf("tp", 15), 8);
  EXPECT_EQ(t.commOf("dp", 9), 12);  // rest index tp1 + 2*pp1 = 3
  EXPECT_EQ(t.commOf("pp", 3), 13 + 3);
  EXPECT_EQ(t.info(12).family, "dp");
  EXPECT_EQ(t.info(12).size, 4);
  EXPECT_EQ(t.indexOf(12, 13), 2);
  EXPECT_EQ(t.indexOf(12, 12), -1);
  EXPECT_EQ(t.indexOf(0, 12), 12);
  EXPECT_EQ(t.member(12, 4), -1);
  EXPECT_EQ(t.info(99).id, -1);
}

TEST(Layout, ExpertParallelCarvedFromDp) {
  // tp2 dp8 ep4: rank = tp + 2*ep + 8*edp.
  const LayoutCommTable t(Layout(layout(2, 1, 4, 8, 1), 16), {});
  EXPECT_EQ(membersOf(t, "ep", 0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(membersOf(t, "ep", 9), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(membersOf(t, "edp", 0), (std::vector<int>{0, 8}));
  EXPECT_EQ(membersOf(t, "dp", 1), (std::vector<int>{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(t.familyIndex("pp"), -1);
}

TEST(Layout, ContextParallelAndDpCp) {
  // tp2 cp2 dp2 pp2: rank = tp + 2*cp + 4*dp + 8*pp.
  const LayoutCommTable t(Layout(layout(2, 2, 1, 2, 2), 16), {});
  EXPECT_EQ(membersOf(t, "cp", 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(membersOf(t, "dp", 1), (std::vector<int>{1, 5}));
  EXPECT_EQ(membersOf(t, "dp-cp", 8), (std::vector<int>{8, 10, 12, 14}));
  EXPECT_EQ(membersOf(t, "pp", 6), (std::vector<int>{6, 14}));
}

TEST(Layout, OtherOrder) {
  // pp-dp-tp: rank = pp + 2*dp + 8*tp.
  const LayoutCommTable t(Layout(layout(2, 1, 1, 4, 2, "pp-dp-tp"), 16), {});
  EXPECT_EQ(membersOf(t, "tp", 0), (std::vector<int>{0, 8}));
  EXPECT_EQ(membersOf(t, "pp", 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(membersOf(t, "dp", 3), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(membersOf(t, "world", 3)[3], 3);
}

TEST(Layout, ExplicitComms) {
  const LayoutCommTable t(Layout(layout(2, 1, 1, 4, 2), 16),
                          {{"x", {3, 7, 1}}, {"y", {0, 1}}, {"y", {2, 3}}});
  const int x = t.commOf("x", 7);
  EXPECT_EQ(x, 21);
  EXPECT_EQ(t.member(x, 0), 3);
  EXPECT_EQ(t.indexOf(x, 1), 2);
  EXPECT_EQ(t.commOf("x", 0), -1);
  EXPECT_EQ(t.commOf("y", 3), 23);
  EXPECT_EQ(t.info(23).size, 2);
  EXPECT_EQ(t.info(23).family, "y");
  EXPECT_THROW(LayoutCommTable(Layout(layout(2, 1, 1, 4, 2), 16), {{"tp", {0, 1}}}), InputError);
}

TEST(Layout, MemberAndIndexAreInverseAt16384) {
  const LayoutCommTable t(Layout(layout(8, 1, 4, 128, 16), 16384), {});
  for (const Family& f : t.families()) {
    for (int r = 0; r < 16384; r += 7) {
      const int c = t.commOfFamily(static_cast<int>(&f - t.families().data()), r);
      ASSERT_GE(c, f.first);
      ASSERT_LT(c, f.first + f.count);
      const int i = t.indexOf(c, r);
      ASSERT_GE(i, 0);
      ASSERT_EQ(t.member(c, i), r) << f.name << " rank " << r;
    }
  }
  EXPECT_EQ(t.info(t.commOf("dp", 0)).size, 128);
  EXPECT_EQ(t.info(t.commOf("ep", 0)).size, 4);
  EXPECT_EQ(t.info(t.commOf("edp", 0)).size, 32);
}

TEST(Layout, RejectsBadSizes) {
  EXPECT_THROW(Layout(layout(0, 1, 1, 4, 2), 8), InputError);
  EXPECT_THROW(Layout(layout(2, 1, 1, 4, 2), 15), InputError);
}

}  // namespace
}  // namespace crystal::graph
