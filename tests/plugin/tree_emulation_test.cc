// A real rank's tree all-reduce against virtual tree neighbours, driven as NCCL's proxy does
// (tree_proxy.h), brings the result to the real rank when `crystal simulate`'s model says it
// reaches the rank's place in the target's tree: at the model's whole time for the deepest
// leaf, earlier for the root and middle ranks. Within 1 % for 8, 64 and 8192 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "crystal/live/collective_log.h"
#include "crystal/live/tree_timing.h"
#include "crystal/model/nccl_model.h"
#include "handle_table.h"
#include "nccl_constants.h"
#include "net_api.h"
#include "state.h"
#include "tree_proxy.h"
#include "tuner.h"

namespace crystal::test {
namespace {

using model::Algo;
using model::Func;
using model::Proto;

constexpr std::uint64_t KiB = 1u << 10, MiB = 1u << 20;

Config targetOf(int nranks) {
  Config cfg;  // built-in target: H200 nodes of 8 GPUs, 8 NICs of 50 GB/s
  cfg.cluster.nodes = std::max(1, nranks / cfg.cluster.gpus_per_node);
  return cfg;
}

// A communicator of `nranks` on the built-in target, configured into the plugin, with an id
// of its own (each test's connections and tuner records apart).
struct Target {
  explicit Target(int nranks)
      : cfg(targetOf(nranks)), m(cfg.cluster, cfg.model), shape(live::blockShape(cfg.cluster, nranks)) {
    static std::uint64_t next_comm = 0x7000;
    comm_id = next_comm++;
    plugin::PluginState::get().configure(cfg);
  }
  Config cfg;
  model::NcclModel m;
  model::CommShape shape;
  std::uint64_t comm_id = 0;
};

// Tree all-reduce channels on the target: the model's choice where it is Tree/Simple, else
// the communicator's channels (NCCL's count for a forced algorithm).
int treeChannels(const model::NcclModel& m, std::uint64_t bytes, const model::CommShape& s) {
  const model::Choice c = m.choose(Func::AllReduce, bytes, s);
  return c.algo == Algo::Tree && c.proto == Proto::Simple ? c.channels : m.commChannels(s);
}

// The model's time for the result to reach one place of the tree: the tandem line of hops
// from the deepest leaf below it, up to the root and back to it (the closed form of
// pipeline.h chainRecurrence on that path: sum of tx + latency, plus (units - 1) x share x
// the slowest hop's tx), with the model's per-channel tree hops.
double placeTimeUs(const model::NcclModel& m, const model::CommShape& s, int rank, int tree,
                   int channels, std::uint64_t bytes) {
  const live::TreePosition pos = live::targetTreePosition(rank, s.nranks, s.ranks_per_node, tree);
  const model::StepTiming nvl = m.treeNvlStep(Proto::Simple, channels, s);
  const model::CommShape net_shape = s.nnodes > 1 ? s : model::CommShape{2, 2, 1};
  const model::StepTiming net = m.treeNetStep(Proto::Simple, channels, net_shape);
  const TreeChunks ch = treeChunks(bytes, channels);
  double sum = 0, slowest = 0;
  std::vector<bool> path = pos.below;
  path.insert(path.end(), pos.loop.begin(), pos.loop.end());
  for (bool is_net : path) {
    const model::StepTiming& h = is_net ? net : nvl;
    const double tx = ch.unit_bytes / (h.bandwidth_GBps * 1e3);
    sum += tx + h.latency_us;
    slowest = std::max(slowest, tx);
  }
  return sum + static_cast<double>(ch.units - 1) * 2.0 * slowest;
}

struct Outcome {
  double emulated_us = 0, place_us = 0, model_us = 0;
  // Operations after the first, end to end: the leaves pay the model's fixed cost (base
  // latency, launch) between operations, so it is in the time, not added as for the first.
  std::vector<double> repeats_us;
  int channels = 0;
  long unknown_waits = 0;
};

// `repeats`: operations after the first on the same connections, each `gap_ns` after the
// real rank finished the one before (0: back to back, as NCCL-tests and hybrid_nccl time).
// `through_tuner`: NCCL's call of the tuner's getCollInfo before the operation (LL128 off, as
// over crystal's NICs; NCCL's own channel count in) records the pick and the channel count;
// else the record is written as the tuner would for a Tree/Simple pick.
Outcome run(int nranks, int self, std::uint64_t bytes, bool through_tuner = false,
            bool ring_shares_send = false, bool nccls_own_channels = false, int repeats = 0,
            live::TimeNs gap_ns = 0, int run_channels = 0, bool enqueued_ahead = false) {
  const Target t(nranks);
  const std::uint64_t comm_id = t.comm_id;
  const Config& cfg = t.cfg;
  const model::NcclModel& m = t.m;
  const model::CommShape& shape = t.shape;
  int channels = treeChannels(m, bytes, shape);
  const auto log = live::collectiveLog(comm_id);
  if (through_tuner) {
    void* tctx = nullptr;
    EXPECT_EQ(plugin::tuner::init(&tctx, comm_id, nranks, nranks, nullptr, nullptr, nullptr),
              nccl::ncclSuccess);
    float table[model::kNumAlgos][model::kNumProtos] = {};
    for (auto& row : table) row[static_cast<int>(Proto::LL128)] = nccl::kAlgoProtoIgnore;
    // NCCL passes 0 (its own count unless the tuner sets one); the tuner sets the model's
    // count when the model's pick is usable, else leaves NCCL's (all channels it built).
    channels = m.commChannels(shape);
    int tuner_channels = nccls_own_channels ? 0 : channels;
    EXPECT_EQ(plugin::tuner::getCollInfo(tctx, nccl::ncclFuncAllReduce, bytes, 1,
                                         reinterpret_cast<float**>(&table[0][0]), model::kNumAlgos,
                                         model::kNumProtos, 0, &tuner_channels),
              nccl::ncclSuccess);
    EXPECT_EQ(plugin::tuner::finalize(tctx), nccl::ncclSuccess);
    std::uint64_t cursor = 0;
    const auto e = log->next(&cursor, [](const live::CollectiveEntry&) { return true; });
    EXPECT_TRUE(e && e->algo == Algo::Tree && e->proto == Proto::Simple && e->bytes == bytes &&
                e->channels == tuner_channels)
        << "the tuner did not record the Tree/Simple pick NCCL makes from its table";
  } else {
    log->append({Func::AllReduce, Algo::Tree, Proto::Simple, bytes, channels});
  }
  const double base_us =
      model::nccl::kBaseLat[static_cast<int>(Algo::Tree)][static_cast<int>(Proto::Simple)] +
      cfg.model.kernel_launch_us.value_or(0.0);
  Outcome o;
  o.channels = channels;
  o.model_us = m.time(Func::AllReduce, bytes, shape, Algo::Tree, Proto::Simple, channels);
  // The place of the real rank: the latest of the channels the operation uses (the first
  // half of NCCL's channels is tree 0, the second tree 1).
  const int per_tree = std::max(1, (channels + 1) / 2);
  for (int c = 0; c < channels; ++c)
    o.place_us = std::max(
        o.place_us, base_us + placeTimeUs(m, shape, self, c < per_tree ? 0 : 1, channels, bytes));
  // A program that enqueues its operations back to back: the tuner saw all of them before
  // NCCL's proxy made the tree connections.
  for (int k = 0; enqueued_ahead && k < repeats; ++k)
    log->append({Func::AllReduce, Algo::Tree, Proto::Simple, bytes, channels});
  void* ctx = nullptr;
  EXPECT_EQ(plugin::net::init(&ctx, comm_id, nullptr, nullptr, nullptr), nccl::ncclSuccess);
  auto conns = connectTree(ctx, comm_id, self, nranks, channels, ring_shares_send);
  static live::TimeNs start = 1'000'000'000;
  const int running = run_channels > 0 ? run_channels : channels;
  const TreeRun r = runTreeAllReduce(conns, bytes, running, start);
  live::TimeNs at = r.end;
  for (int k = 0; k < repeats; ++k) {
    if (!enqueued_ahead) log->append({Func::AllReduce, Algo::Tree, Proto::Simple, bytes, channels});
    const TreeRun again = runTreeAllReduce(conns, bytes, running, at + gap_ns);
    o.repeats_us.push_back(static_cast<double>(again.end - (at + gap_ns)) / 1e3);
    at = again.end;
  }
  start = at + 1'000'000'000;
  closeTree(conns);
  EXPECT_EQ(plugin::net::finalize(ctx), nccl::ncclSuccess);
  o.emulated_us = static_cast<double>(r.last_recv - r.start) / 1e3 + base_us;
  o.unknown_waits = r.unknown_waits;
  return o;
}

std::string sizeName(std::uint64_t b) {
  if (b >= (1u << 30)) return std::to_string(b >> 30) + " GiB";
  if (b < MiB) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b >> 20) + " MiB";
}

// `whole`: the rank is the deepest leaf of the target's tree on some channel: its result
// comes at the model's whole time.
void expectWithin(int nranks, int self, std::uint64_t bytes, bool whole, double tol = 0.01) {
  const Outcome o = run(nranks, self, bytes);
  const double diff = (o.emulated_us - o.place_us) / o.place_us;
  std::printf(
      "tree all-reduce %5d ranks (rank %4d) %8s %2d ch: emulated %10.1f us, model at "
      "its place %10.1f us (%+6.2f %%), model whole %10.1f us\n",
      nranks, self, sizeName(bytes).c_str(), o.channels, o.emulated_us, o.place_us, 100 * diff,
      o.model_us);
  EXPECT_LE(std::abs(diff), tol) << bytes << " B on " << nranks << " ranks, rank " << self;
  if (whole) {
    EXPECT_LE(std::abs(o.emulated_us - o.model_us) / o.model_us, tol)
        << "deepest leaf: " << bytes << " B on " << nranks << " ranks, rank " << self;
  }
  EXPECT_EQ(o.unknown_waits, 0) << "a receive was timed by the stall bound, not by its tree";
}

TEST(TreeEmulation, EightRanksOneNodeChainWithinOnePercent) {
  for (std::uint64_t b = KiB; b <= 1024 * MiB; b *= 8) expectWithin(8, 7, b, true);
  expectWithin(8, 7, 1024 * MiB, true);
  for (int self : {0, 3}) expectWithin(8, self, 4 * MiB, false);
}

TEST(TreeEmulation, SixtyFourRanksDeepestLeafWithinOnePercent) {
  for (std::uint64_t b = KiB; b <= 1024 * MiB; b *= 8) expectWithin(64, 63, b, true);
  expectWithin(64, 63, 1024 * MiB, true);
}

// Root of tree 0 (rank 0), a node head in the middle (rank 32), a chain member (rank 13):
// each gets the result when the model's tree brings it to that place.
TEST(TreeEmulation, SixtyFourRanksRootMiddleAndChainPlaces) {
  for (int self : {0, 13, 32})
    for (std::uint64_t b : {64 * KiB, MiB, 16 * MiB}) expectWithin(64, self, b, false);
}

TEST(TreeEmulation, EightThousandRanksDeepestLeafWithinOnePercent) {
  for (std::uint64_t b : {MiB, 64 * MiB, 1024 * MiB}) expectWithin(8192, 8191, b, true);
  expectWithin(8192, 0, 16 * MiB, false);
}

// The record comes from the tuner's getCollInfo (its pick and channels), as in a real run:
// Tree/Simple from 512 KiB to 128 MiB on 64 ranks with LL128 off.
TEST(TreeEmulation, TunerRecordDrivesTheChunking) {
  for (std::uint64_t b : {MiB, 16 * MiB}) {
    for (bool own : {false, true}) {
      const Outcome o = run(64, 63, b, /*through_tuner=*/true, false, own);
      EXPECT_LE(std::abs(o.emulated_us - o.model_us) / o.model_us, 0.01)
          << b << " B" << (own ? " (NCCL's channel count)" : "") << ": " << o.emulated_us << " vs "
          << o.model_us;
    }
  }
}

// Rank 0's parent in tree 1 is rank 1, its ring next: NCCL sends up on the ring's connection,
// so the tree channel sees no send up; its result still comes when the model brings it there.
TEST(TreeEmulation, SendUpOnTheRingsConnection) {
  for (std::uint64_t b : {64 * KiB, 16 * MiB}) {
    const Outcome o = run(64, 0, b, false, /*ring_shares_send=*/true);
    EXPECT_LE(std::abs(o.emulated_us - o.place_us) / o.place_us, 0.01)
        << b << " B: " << o.emulated_us << " vs " << o.place_us;
    EXPECT_EQ(o.unknown_waits, 0);
  }
}

// Operations in a row: a rank above the deepest leaf (root, node head, chain member) holds
// its result early, but its next operation waits for leaves that finished later, so every
// place runs at the model's whole time per operation, as the target's ranks do in a loop.
// Without that, rank 0 (root of tree 0) ran 16 MiB all-reduces in 419 us against 579. Rank 5
// (a chain member whose tree-0 parent is its ring next) too.
void expectRowAtModelTime(int nranks, int self, std::uint64_t bytes, live::TimeNs gap_ns) {
  const Outcome o = run(nranks, self, bytes, false, false, false, 3, gap_ns);
  ASSERT_EQ(o.repeats_us.size(), 3u);
  for (double us : o.repeats_us) {
    std::printf("tree all-reduce %5d ranks (rank %4d) %8s, gap %5.1f ms: next operation %8.1f us, "
                "model whole %8.1f us (first %8.1f)\n",
                nranks, self, sizeName(bytes).c_str(), static_cast<double>(gap_ns) / 1e6, us,
                o.model_us, o.emulated_us);
    EXPECT_LE(std::abs(us - o.model_us) / o.model_us, 0.01)
        << bytes << " B on " << nranks << " ranks, rank " << self << ", gap " << gap_ns;
  }
  EXPECT_EQ(o.unknown_waits, 0);
}

TEST(TreeEmulation, OperationsInARowRunAtTheModelsWholeTime) {
  for (int self : {0, 5, 13, 32, 63})
    for (std::uint64_t b : {KiB, 64 * KiB, 256 * KiB, MiB, 16 * MiB, 128 * MiB}) expectRowAtModelTime(64, self, b, 0);
  expectRowAtModelTime(8192, 0, 16 * MiB, 0);
}

// hybrid_nccl and NCCL-tests enqueue their operations back to back, so the tuner has seen
// them all before NCCL's proxy makes a runtime-connected tree channel. The channel starts at
// the first operation it has not run, not the newest (rank 5 of 64 on the H200: 13 of 14
// 1 KiB all-reduces were timed at the 512 KiB slot size, 441 us instead of 150). NCCL runs a
// 1 KiB operation on one channel; rank 5's send up to 6 travels on the ring's connection.
TEST(TreeEmulation, ChannelsConnectedAfterOperationsWereEnqueued) {
  for (std::uint64_t b : {KiB, MiB})
    for (int running : {1, 0}) {  // 0: every channel of the record
      const Outcome o = run(64, 5, b, false, /*ring_shares_send=*/running == 1, false, 4, 0,
                            running, /*enqueued_ahead=*/true);
      ASSERT_EQ(o.repeats_us.size(), 4u);
      for (double us : o.repeats_us) {
        std::printf("tree all-reduce rank 5 of 64, %s on %s channel(s), enqueued ahead: %.1f us, "
                    "model %.1f us\n",
                    sizeName(b).c_str(), running == 1 ? "1" : "all", us, o.model_us);
        EXPECT_LE(std::abs(us - o.model_us) / o.model_us, running == 1 ? 0.03 : 0.01)
            << b << " B on " << (running == 1 ? "one channel" : "all channels");
      }
    }
}

// After compute (a gap), the leaves start when they finished plus the same gap: the root's
// next operation still takes the whole time.
TEST(TreeEmulation, AfterAGapTheRootStillWaitsForItsLeaves) {
  for (std::uint64_t b : {MiB, 16 * MiB}) expectRowAtModelTime(64, 0, b, 10'000'000);
}

// hybrid_nccl's sweep: sizes one after the other on one communicator (2 warm-ups and 20
// operations each, 2 ms of the program between sizes): every size at the model's time.
TEST(TreeEmulation, ASweepOfSizesOnOneCommunicatorStaysAtTheModel) {
  const int nranks = 64, self = 0;
  const Target t(nranks);
  const std::uint64_t comm_id = t.comm_id;
  const model::NcclModel& m = t.m;
  const model::CommShape& shape = t.shape;
  const int channels = 16;
  const auto log = live::collectiveLog(comm_id);
  void* ctx = nullptr;
  ASSERT_EQ(plugin::net::init(&ctx, comm_id, nullptr, nullptr, nullptr), nccl::ncclSuccess);
  auto conns = connectTree(ctx, comm_id, self, nranks, channels, false);
  live::TimeNs at = 5'000'000'000;
  for (std::uint64_t b = KiB; b <= 64 * MiB; b *= 4) {
    double sum = 0;
    for (int k = 0; k < 22; ++k) {
      log->append({Func::AllReduce, Algo::Tree, Proto::Simple, b, channels});
      const TreeRun r = runTreeAllReduce(conns, b, channels, at);
      if (k >= 2) sum += static_cast<double>(r.end - at) / 1e3;
      at = r.end;
    }
    at += 2'000'000;  // the program between sizes
    const double model_us = m.time(Func::AllReduce, b, shape, Algo::Tree, Proto::Simple, channels);
    std::printf("sweep %8s: %8.1f us per operation, model %8.1f us\n", sizeName(b).c_str(),
                sum / 20, model_us);
    EXPECT_LE(std::abs(sum / 20 - model_us) / model_us, 0.01) << b << " B";
  }
  closeTree(conns);
  EXPECT_EQ(plugin::net::finalize(ctx), nccl::ncclSuccess);
}

// Places in the target tree follow NCCL's rules: the deepest leaf is as deep as the model's
// tree (ranks_per_node - 1 + log2 nodes), the root of tree 0 is rank 0.
TEST(TreeEmulation, TargetTreePositions) {
  const live::TreePosition leaf = live::targetTreePosition(63, 64, 8, 0);
  EXPECT_TRUE(leaf.below.empty());
  EXPECT_EQ(leaf.depth, 7 + 3);
  EXPECT_EQ(leaf.loop.size(), 2u * (7 + 3));
  const live::TreePosition root = live::targetTreePosition(0, 64, 8, 0);
  EXPECT_TRUE(root.loop.empty());
  EXPECT_EQ(root.below.size(), 7u + 3u);
  EXPECT_EQ(live::targetTreePosition(8191, 8192, 8, 0).depth, 7 + 10);
  // NCCL's double binary tree of 8: 0 -> 4 -> {2, 6}; mirrored tree 1: 7 -> 3 -> {5, 1}.
  EXPECT_EQ(live::doubleBinaryTree(8, 4, 0).up, 0);
  EXPECT_EQ(live::doubleBinaryTree(8, 4, 0).down[0], 2);
  EXPECT_EQ(live::doubleBinaryTree(8, 4, 0).down[1], 6);
  EXPECT_EQ(live::doubleBinaryTree(8, 3, 1).up, 7);
  EXPECT_EQ(live::doubleBinaryTree(8, 0, 1).up, 1);
  // n odd: tree 1 is shifted by one.
  EXPECT_EQ(live::doubleBinaryTree(5, 1, 1).up, -1);
}

// NCCL reuses the tree's connection to the real rank's ring neighbour when a ring connects
// after the tree (an all-gather after an all-reduce: rank 1 of two real ranks under
// p2p_peers, whose chain child is its ring next, took 4.3 ms for a 4 MiB all-gather there
// against 1.0 ms when the all-gather ran first, H100, 2026-12-06). Rank 13 of 64: 14 is its
// parent in tree 0, its child in tree 1 and its ring next. The ring's sends on that
// connection, announced as ring operations by NCCL's profiler, are timed peer-ready on the
// target's NVLink (the first of a burst at its delivery, the others as they leave the link),
// and the tree's next all-reduce still runs at the model's time (its units were not counted).
TEST(TreeEmulation, RingSendsOnATreeConnectionArePeerReadyAndLeaveTheTreeAlone) {
  const int nranks = 64, self = 13;
  ASSERT_EQ(live::doubleBinaryTree(nranks, self, 0).up, self + 1);
  const Target t(nranks);
  const std::uint64_t bytes = 4 * MiB;
  const int channels = treeChannels(t.m, bytes, t.shape);
  const auto log = live::collectiveLog(t.comm_id);
  log->append({Func::AllReduce, Algo::Tree, Proto::Simple, bytes, channels});
  void* ctx = nullptr;
  ASSERT_EQ(plugin::net::init(&ctx, t.comm_id, nullptr, nullptr, nullptr), nccl::ncclSuccess);
  auto conns = connectTree(ctx, t.comm_id, self, nranks, channels);
  const live::TimeNs start = 50'000'000'000;
  const TreeRun first = runTreeAllReduce(conns, bytes, channels, start);
  // Channel 0 (tree 0): the send to the parent, 14, is the ring's send to its next.
  ASSERT_NE(conns[0].to_parent, nullptr);
  auto& send =
      static_cast<plugin::DataComm&>(*plugin::HandleTable::instance().find(conns[0].to_parent));
  constexpr int kSends = 4;
  constexpr std::uint64_t kBytes = 512 << 10;
  plugin::PluginState::get().proxyOpStarted({.comm = t.comm_id,
                                             .channel = 0,
                                             .peer = self + 1,
                                             .send = true,
                                             .transfers = kSends,
                                             .op = 0xa11,
                                             .ring = true,
                                             .allgather = true,
                                             .channels = 1});
  const live::CommLinks links =
      live::commLinks(plugin::PluginState::get().model(), t.cfg.cluster, nranks);
  ASSERT_TRUE(links.sameNode(self, self + 1));
  const live::TimeNs at = first.end + 1'000'000'000;  // the NVLink port long idle
  const live::TimeNs occupancy = links.nvl.occupancy(kBytes);
  std::vector<plugin::Request*> reqs;
  static char byte;
  for (int i = 0; i < kSends; ++i) {
    plugin::Request* r = send.allocRequest();
    ASSERT_NE(r, nullptr);
    send.isend(*r, &byte, kBytes, 0, at);
    EXPECT_FALSE(r->own_op) << i;
    // Back to back: each leaves the link after the one before; the burst's latency once.
    EXPECT_EQ(r->due, std::max(at + (i + 1) * occupancy, at + occupancy + links.nvl.latency_ns))
        << i;
    reqs.push_back(r);
  }
  for (plugin::Request* r : reqs) {
    EXPECT_TRUE(send.test(*r, r->due, nullptr));
    send.freeRequest(*r);
  }
  // The next all-reduce, as a next operation runs (expectRowAtModelTime): the model's whole
  // time.
  log->append({Func::AllReduce, Algo::Tree, Proto::Simple, bytes, channels});
  const live::TimeNs again_at = at + 1'000'000'000;
  const TreeRun again = runTreeAllReduce(conns, bytes, channels, again_at);
  const double model_us =
      t.m.time(Func::AllReduce, bytes, t.shape, Algo::Tree, Proto::Simple, channels);
  const double again_us = static_cast<double>(again.end - again_at) / 1e3;
  EXPECT_NEAR(again_us, model_us, 0.01 * model_us) << "the tree's next all-reduce";
  closeTree(conns);
  EXPECT_EQ(plugin::net::finalize(ctx), nccl::ncclSuccess);
}

}  // namespace
}  // namespace crystal::test
