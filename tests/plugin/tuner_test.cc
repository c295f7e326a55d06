// Tuner mapping: NCCL's (nRanks, nNodes) onto the target, cost table written from the
// target model, the switch that turns it off.
#include "tuner.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <array>

#include "crystal/live/collective_log.h"
#include "crystal/live/target_model.h"
#include "p2p_agent.h"
#include "state.h"
#include "tuner_memo.h"

namespace crystal::plugin {
namespace {

TEST(PluginTuner, FlatEmulationMapsOntoTargetNodes) {
  ClusterConfig c;
  c.gpus_per_node = 8;
  auto s = targetShape(c, 8192, 8192);  // each real/virtual rank its own NCCL "node"
  EXPECT_EQ(s.nranks, 8192);
  EXPECT_EQ(s.ranks_per_node, 8);
  EXPECT_EQ(s.nnodes, 1024);
  s = targetShape(c, 16, 2);  // NCCL's grouping is real (8-GPU real nodes)
  EXPECT_EQ(s.ranks_per_node, 8);
  EXPECT_EQ(s.nnodes, 2);
  s = targetShape(c, 4, 4);  // smaller than a node
  EXPECT_EQ(s.ranks_per_node, 4);
  EXPECT_EQ(s.nnodes, 1);
}

TEST(PluginTuner, CostTableComesFromTheModel) {
  Config cfg;
  auto m = live::makeClusterTargetModel(cfg);
  const model::CommShape s{64, 8, 8};
  const auto cost = m->costTable(model::Func::AllReduce, 1 << 26, s);
  float table[7][3];
  for (auto& r : table)
    for (float& e : r) e = 5.0f;
  table[2][1] = -1.0f;  // NCCL: CollNet unusable
  int ch = 0;
  ASSERT_TRUE(applyTargetCosts(*m, nccl::ncclFuncAllReduce, 1 << 26, s, &table[0][0], 7, 3, &ch));
  for (int a = 0; a < 7; ++a)
    for (int p = 0; p < 3; ++p) {
      if (a == 2 && p == 1) {
        EXPECT_EQ(table[a][p], -1.0f);
      } else if (cost[a][p] >= 0) {
        EXPECT_FLOAT_EQ(table[a][p], cost[a][p]);
      } else {
        EXPECT_EQ(table[a][p], -1.0f);
      }
    }
  const auto choice = m->choose(model::Func::AllReduce, 1 << 26, s);
  EXPECT_EQ(ch, choice.channels);
  // Not a collective the model covers: table untouched.
  float t2[7][3] = {};
  EXPECT_FALSE(applyTargetCosts(*m, nccl::ncclFuncSendRecv, 100, s, &t2[0][0], 7, 3, &ch));
  EXPECT_EQ(t2[1][2], 0.0f);
}

TEST(PluginTuner, LargeMessagesPickSimpleSmallPickLL) {
  Config cfg;
  auto m = live::makeClusterTargetModel(cfg);
  const model::CommShape s{64, 8, 8};
  EXPECT_EQ(m->choose(model::Func::AllReduce, 1ull << 30, s).proto, model::Proto::Simple);
  EXPECT_EQ(m->choose(model::Func::AllReduce, 1024, s).proto, model::Proto::LL);
}

TEST(PluginTuner, SwitchTurnsItOff) {
  Config cfg;
  cfg.source = "test";
  cfg.emulation.tuner = false;
  PluginState::get().configure(cfg);
  EXPECT_FALSE(PluginState::get().tunerEnabled());
  void* ctx = nullptr;
  ASSERT_EQ(tuner::init(&ctx, 1, 16, 16, nullptr, nullptr, nullptr), nccl::ncclSuccess);
  float table[7][3] = {};
  int ch = 0;
  ASSERT_EQ(tuner::getCollInfo(ctx, nccl::ncclFuncAllReduce, 1 << 20, 1,
                               reinterpret_cast<float**>(table), 7, 3, 0, &ch),
            nccl::ncclSuccess);
  EXPECT_EQ(table[1][2], 0.0f);
  EXPECT_EQ(ch, 0);
  EXPECT_EQ(tuner::finalize(ctx), nccl::ncclSuccess);
  cfg.emulation.tuner = true;
  setenv("CRYSTAL_TUNER", "0", 1);
  PluginState::get().configure(cfg);
  EXPECT_FALSE(PluginState::get().tunerEnabled());
  unsetenv("CRYSTAL_TUNER");
  PluginState::get().configure(cfg);
  EXPECT_TRUE(PluginState::get().tunerEnabled());
}

// NCCL's getCollInfo call under NCCL_PROTO=Simple (only Tree/Simple and Ring/Simple usable):
// the channel count the tuner sets, and what NCCL then runs (`run`).
int simpleOnlyChannels(nccl::ncclFunc_t f, std::size_t bytes, TunerPick* run = nullptr) {
  void* ctx = nullptr;
  EXPECT_EQ(tuner::init(&ctx, 2, 64, 64, nullptr, nullptr, nullptr), nccl::ncclSuccess);
  float table[7][3];
  for (int a = 0; a < 7; ++a)
    for (int p = 0; p < 3; ++p) table[a][p] = p == 2 && a < 2 ? 0.0f : -1.0f;
  int ch = 0;
  EXPECT_EQ(tuner::getCollInfo(ctx, f, bytes, 1, reinterpret_cast<float**>(table), 7, 3, 0, &ch),
            nccl::ncclSuccess);
  EXPECT_EQ(tuner::finalize(ctx), nccl::ncclSuccess);
  if (run) *run = bestEntry(&table[0][0], 7, 3);
  return ch;
}

// NCCL_PROTO=Simple leaves only Simple entries usable, so the model's pick at 1 MiB (LL) is
// not: the target's count is Ring/Simple's own (16), and the tuner folds the ring onto the
// channels ring_fold.h asks for (one at 1 MiB, all 16 for the GPU-bound 1 GiB).
// CRYSTAL_FOLD_RINGS=0 keeps the target's count.
TEST(PluginTuner, RingsAreFoldedOntoFewerChannels) {
  Config cfg;
  cfg.source = "test";
  cfg.cluster.nodes = 8;
  auto channelsFor = [&](std::size_t bytes, nccl::ncclFunc_t f = nccl::ncclFuncAllGather) {
    TunerPick run;
    const int ch = simpleOnlyChannels(f, bytes, &run);
    EXPECT_EQ(run.algo, 1);  // NCCL runs Ring/Simple
    return ch;
  };
  PluginState::get().configure(cfg);
  const int target = PluginState::get().model().channels(
      model::Func::AllGather, 1 << 20, {64, 8, 8}, model::Algo::Ring, model::Proto::Simple);
  EXPECT_EQ(target, 16);
  EXPECT_EQ(channelsFor(1 << 20), 1);
  EXPECT_EQ(channelsFor(std::size_t{1} << 30), 16);
  // Not folded: the target's count for the entry NCCL runs (the model's pick, LL, is not in
  // the table), never left to NCCL (all the real rank's channels).
  setenv("CRYSTAL_FOLD_RINGS", "0", 1);
  PluginState::get().configure(cfg);
  EXPECT_EQ(channelsFor(1 << 20), 16);
  unsetenv("CRYSTAL_FOLD_RINGS");
  cfg.emulation.fold_rings = false;
  PluginState::get().configure(cfg);
  EXPECT_EQ(channelsFor(1 << 20), 16);
  // With more real channels than the target's (NCCL_MIN_NCHANNELS=32), a 1 GiB broadcast runs
  // on more than the target's 16 (its GPU cannot carry it at the model's pace on 16); rings
  // keep at most the target's.
  cfg.emulation.fold_rings = true;
  PluginState::get().configure(cfg);
  EXPECT_EQ(channelsFor(std::size_t{1} << 30, nccl::ncclFuncBroadcast), 16);
  setenv("NCCL_MIN_NCHANNELS", "32", 1);
  PluginState::get().configure(cfg);
  EXPECT_GT(channelsFor(std::size_t{1} << 30, nccl::ncclFuncBroadcast), 16);
  EXPECT_EQ(channelsFor(std::size_t{1} << 30), 16);
  EXPECT_EQ(channelsFor(1 << 20), 1);
  unsetenv("NCCL_MIN_NCHANNELS");
  // Under p2p_peers a comm whose rings stay on the real rank's node at the rank (its pool
  // taken, the rank in the middle of its node) keeps the target's channels: they run over
  // P2P, paced on the GPU (plugin/p2p_agent.h), with no NET proxy to spare; with more real
  // channels (NCCL_MIN_NCHANNELS) a large ring runs on more, as its GPU needs (17 GB/s a
  // channel: a 1 GiB all-gather's 1.06 GB of bus bytes in the model's ~2.7 ms wants 29 with
  // the margin). Other comms (a node's first or last rank, split children) fold as on the
  // default path. CRYSTAL_FOLD_RINGS wins over both.
  cfg.emulation.p2p_peers = true;
  PluginState::get().configure(cfg);
  EXPECT_EQ(channelsFor(1 << 20), 1);
  PluginState::get().setCommRingsOnNode(2);  // comm 2: simpleOnlyChannels' comm id
  EXPECT_EQ(channelsFor(1 << 20), 16);
  EXPECT_EQ(channelsFor(std::size_t{1} << 30), 16);
  EXPECT_TRUE(PluginState::get().foldRings(3));
  EXPECT_FALSE(PluginState::get().foldRings(2));
  setenv("NCCL_MIN_NCHANNELS", "32", 1);
  PluginState::get().configure(cfg);
  PluginState::get().setCommRingsOnNode(2);
  EXPECT_EQ(channelsFor(1 << 20), 16);
  const int big = channelsFor(std::size_t{1} << 30);
  EXPECT_GT(big, 24);
  EXPECT_LE(big, 32);
  unsetenv("NCCL_MIN_NCHANNELS");
  setenv("CRYSTAL_FOLD_RINGS", "1", 1);
  PluginState::get().configure(cfg);
  PluginState::get().setCommRingsOnNode(2);
  EXPECT_EQ(channelsFor(1 << 20), 1);
  unsetenv("CRYSTAL_FOLD_RINGS");
  PluginState::get().configure(cfg);  // forgets comm 2's setting
  EXPECT_EQ(channelsFor(1 << 20), 1);
  cfg.emulation.p2p_peers = false;
  cfg.emulation.fold_rings = true;
  PluginState::get().configure(cfg);
}

// Where the tuner runs a chain on more real channels than the target's, the collective log
// (which the P2P pacer reads) says both: the pacer times the target's chain (its fill) with
// R's units at the target's aggregate pace (P2pPacerLag.MoreRealChannelsThanTheTargetsKeepItsFill).
TEST(PluginTuner, LogsTheTargetsChannelsWhereTheRealRankRunsMore) {
  Config cfg;
  cfg.source = "test";
  cfg.cluster.nodes = 8;
  cfg.emulation.p2p_peers = true;
  setenv("NCCL_MIN_NCHANNELS", "32", 1);
  PluginState::get().configure(cfg);
  PluginState::get().setCommRingsOnNode(2);  // comm 2: simpleOnlyChannels' comm id
  const auto log = live::collectiveLog(2);
  std::uint64_t cursor = log->appended();
  auto logged = [&] {
    const auto e = log->next(&cursor, [](const live::CollectiveEntry&) { return true; });
    EXPECT_TRUE(e.has_value());
    return e.value_or(live::CollectiveEntry{});
  };
  const int wide = simpleOnlyChannels(nccl::ncclFuncReduce, std::size_t{1} << 30);
  EXPECT_GT(wide, 16);
  live::CollectiveEntry e = logged();
  EXPECT_EQ(e.func, model::Func::Reduce);
  EXPECT_EQ(e.channels, wide);
  EXPECT_EQ(e.target_channels, 16);
  EXPECT_EQ(simpleOnlyChannels(nccl::ncclFuncReduce, 1 << 20), 16);
  e = logged();
  EXPECT_EQ(e.channels, 16);
  EXPECT_EQ(e.target_channels, 0) << "R runs the target's count";
  unsetenv("NCCL_MIN_NCHANNELS");
  cfg.emulation.p2p_peers = false;
  PluginState::get().configure(cfg);
}

// Which real ranks have both ring neighbours on their own node under p2p_peers, from where the
// host placed them (its node's GPUs of the rank's host, its ring neighbours there).
TEST(PluginTuner, P2pRingsStayOnNodeInTheMiddleOfANodeOrOnOneNode) {
  EXPECT_TRUE(p2pRingsStayOnNode(8, {12, 14})) << "rank 13 of 64";
  EXPECT_FALSE(p2pRingsStayOnNode(8, {-1, 1})) << "rank 0 of 64: receives over the NET";
  EXPECT_FALSE(p2pRingsStayOnNode(8, {6, -1})) << "rank 7 of 64: sends over the NET";
  EXPECT_TRUE(p2pRingsStayOnNode(8, {7, 1})) << "rank 0 of 64 in a rotated ring, or of 8";
  EXPECT_FALSE(p2pRingsStayOnNode(0, {-1, -1})) << "no GPU of its node is virtual";
  EXPECT_FALSE(p2pRingsStayOnNode(1, {0, 0})) << "a node of one";
}

// NCCL_PROTO=Simple rules out the model's pick for a 16 MiB all-reduce on 64 ranks; the entry
// NCCL runs instead still gets the target's channel count for it, not NCCL's own count (all
// of the real rank's channels: with 32 the tree timing's record named a 32-channel target).
TEST(PluginTuner, ForcedProtocolGetsTheTargetsChannelsForTheEntryNcclRuns) {
  Config cfg;
  cfg.source = "test";
  cfg.cluster.nodes = 8;
  PluginState::get().configure(cfg);
  const std::size_t bytes = std::size_t{16} << 20;
  const model::CommShape shape{64, 8, 8};
  const model::Choice pick =
      PluginState::get().model().choose(model::Func::AllReduce, bytes, shape);
  ASSERT_NE(pick.proto, model::Proto::Simple) << "the case needs a non-Simple model pick";
  TunerPick run;
  const int ch = simpleOnlyChannels(nccl::ncclFuncAllReduce, bytes, &run);
  ASSERT_EQ(run.proto, 2);
  const int target = PluginState::get().model().channels(
      model::Func::AllReduce, bytes, shape, static_cast<model::Algo>(run.algo),
      model::Proto::Simple);
  EXPECT_GT(target, 0);
  if (run.algo != static_cast<int>(model::Algo::Ring)) {
    EXPECT_EQ(ch, target);  // a tree: never folded
  } else {
    EXPECT_GE(ch, 1);
    EXPECT_LE(ch, target);
  }
}

// The memo answers as the model does: for every function, size and NCCL mask (all entries
// usable, NCCL_PROTO=Simple's, none), the first call (computed) and the second (remembered)
// leave the table and the channel count exactly as applyTargetCosts does.
TEST(PluginTunerMemo, AnswersAsTheModelDoesComputedOrRemembered) {
  Config cfg;
  auto m = live::makeClusterTargetModel(cfg);
  const model::CommShape s{64, 8, 8};
  TunerMemo memo;
  using Table = std::array<float, 21>;
  auto fill = [](int mask) {
    Table t;
    for (int a = 0; a < 7; ++a)
      for (int p = 0; p < 3; ++p) {
        const bool usable = mask == 0 || (mask == 1 && p == 2 && a < 2);
        t[a * 3 + p] = usable ? 0.0f : -1.0f;
      }
    return t;
  };
  int cases = 0;
  for (int f = nccl::ncclFuncBroadcast; f <= nccl::ncclFuncSendRecv; ++f)
    for (const std::size_t bytes : {std::size_t{1024}, std::size_t{1} << 20, std::size_t{1} << 30})
      for (int mask = 0; mask < 3; ++mask) {
        const auto func = static_cast<nccl::ncclFunc_t>(f);
        Table want = fill(mask);
        int want_ch = -7;
        const bool want_applied = applyTargetCosts(*m, func, bytes, s, want.data(), 7, 3, &want_ch);
        for (int round = 0; round < 2; ++round) {
          Table got = fill(mask);
          int ch = -7;
          EXPECT_EQ(memo.apply(*m, func, bytes, s, got.data(), 7, 3, &ch), want_applied)
              << f << " " << bytes << " " << mask << " round " << round;
          EXPECT_EQ(got, want) << f << " " << bytes << " " << mask << " round " << round;
          EXPECT_EQ(ch, want_ch) << f << " " << bytes << " " << mask << " round " << round;
        }
        ++cases;
      }
  EXPECT_EQ(memo.size(), static_cast<std::size_t>(cases));
  EXPECT_EQ(memo.hits(), static_cast<std::uint64_t>(cases));
  // A null nChannels is left alone, answered or remembered.
  Table t = fill(1);
  EXPECT_TRUE(memo.apply(*m, nccl::ncclFuncAllReduce, 1 << 20, s, t.data(), 7, 3, nullptr));
  EXPECT_EQ(memo.hits(), static_cast<std::uint64_t>(cases) + 1);
}

// A program that asks every size once keeps the memo bounded; another model (the plugin
// configured again) starts it over.
TEST(PluginTunerMemo, StaysBoundedAndFollowsTheModel) {
  Config cfg;
  auto m = live::makeClusterTargetModel(cfg);
  const model::CommShape s{64, 8, 8};
  TunerMemo memo;
  float t[21];
  for (std::size_t i = 0; i <= TunerMemo::kMaxKeys; ++i) {
    std::fill(std::begin(t), std::end(t), 0.0f);
    int ch = 0;
    ASSERT_TRUE(memo.apply(*m, nccl::ncclFuncAllGather, 4096 + i, s, t, 7, 3, &ch));
  }
  EXPECT_LE(memo.size(), TunerMemo::kMaxKeys);
  EXPECT_EQ(memo.hits(), 0u);
  cfg.cluster.nodes = 2;
  auto other = live::makeClusterTargetModel(cfg);
  std::fill(std::begin(t), std::end(t), 0.0f);
  int ch = 0;
  EXPECT_TRUE(memo.apply(*other, nccl::ncclFuncAllGather, 4096, s, t, 7, 3, &ch));
  EXPECT_EQ(memo.size(), 1u);
  EXPECT_EQ(memo.hits(), 0u);
}

}  // namespace
}  // namespace crystal::plugin
