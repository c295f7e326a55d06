#include "tree_proxy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <utility>

#include "comm.h"
#include "crystal/live/handle.h"
#include "crystal/live/tree_timing.h"
#include "handle_table.h"
#include "net_api.h"
#include "state.h"

namespace crystal::test {
namespace {

using plugin::DataComm;
using plugin::Request;

constexpr long kStepsInFlight = 8;            // NCCL_STEPS
constexpr double kStepBytes = (4 << 20) / 8;  // Simple buffSize / NCCL_STEPS

DataComm& dataComm(void* token) {
  auto* c = plugin::HandleTable::instance().find(token);
  EXPECT_NE(c, nullptr);
  return static_cast<DataComm&>(*c);
}

// One connection's requests, oldest first (NCCL tests them in order).
struct Conn {
  DataComm* comm = nullptr;
  std::deque<Request*> out;
  long posted = 0, done = 0;
};

struct Channel {
  bool has_parent = false;
  bool sends_up = false;  // false: its sends up travel on the ring's connection (not here)
  Conn up_send, down_recv;
  std::vector<Conn> down_sends, up_recvs;
  long reduced = 0;    // chunks the GPU reduced from its children (and sent up)
  long forwarded = 0;  // chunks the GPU sent down to its children
};

bool testOldest(Conn& c, live::TimeNs now) {
  bool any = false;
  while (!c.out.empty() && c.comm->test(*c.out.front(), now, nullptr)) {
    c.comm->freeRequest(*c.out.front());
    c.out.pop_front();
    ++c.done;
    any = true;
  }
  return any;
}

void post(Conn& c, bool send, std::size_t bytes, live::TimeNs now, long* requests) {
  static char buffer[8];  // the plugin never touches data for virtual peers without regMr
  Request* r = c.comm->allocRequest();
  ASSERT_NE(r, nullptr);
  if (send) {
    c.comm->isend(*r, buffer, bytes, 0, now);
    ++*requests;
  } else {
    void* data = buffer;
    c.comm->irecv(*r, 1, &data, &bytes, nullptr, now);
  }
  c.out.push_back(r);
  ++c.posted;
}

}  // namespace

TreeChunks treeChunks(std::uint64_t bytes, int channels) {
  const double per_channel = static_cast<double>(bytes) / std::max(1, channels);
  TreeChunks t;
  t.units = std::max<long>(1, static_cast<long>(std::ceil(per_channel / kStepBytes)));
  t.unit_bytes = per_channel / static_cast<double>(t.units);
  return t;
}

std::vector<TreeChannelConns> connectTree(void* ctx, std::uint64_t comm_id, int self, int nranks,
                                          int channels, bool ring_shares_send) {
  const int per_tree = std::max(1, (channels + 1) / 2);
  const int nics = plugin::PluginState::get().ndev();
  std::vector<TreeChannelConns> out(static_cast<std::size_t>(2 * per_tree));
  // The host numbers the connections to one peer in one direction by channel: a peer that
  // is a neighbour in both trees gets ordinals 0..2n-1.
  std::map<std::pair<bool, int>, int> ordinals;
  for (int c = 0; c < 2 * per_tree; ++c) {
    const int tree = c < per_tree ? 0 : 1;
    const live::TreeNeighbours t = live::doubleBinaryTree(nranks, self, tree);
    TreeChannelConns& ch = out[static_cast<std::size_t>(c)];
    auto sendTo = [&](int peer) {
      const int k = ordinals[{true, peer}]++;
      return connectVirtual(ctx, c % nics,
                            ConnId{comm_id, self, peer, nranks, (peer - self + nranks) % nranks, k,
                                   live::kGraphTree});
    };
    auto recvFrom = [&](int peer) {
      const int k = ordinals[{false, peer}]++;
      RingConns r;
      r.recv = acceptVirtual(
          ctx, c % nics,
          ConnId{comm_id, self, peer, nranks, (self - peer + nranks) % nranks, k, live::kGraphTree},
          &r.listen, &r.host_fd);
      void* recv = r.recv;
      r.recv = nullptr;  // closed through from_parent / from_children
      ch.accepted.push_back(r);
      return recv;
    };
    // NCCL connects a channel's tree receives (from its children and parent) and sends.
    for (int d : t.down)
      if (d >= 0) ch.from_children.push_back(recvFrom(d));
    if (t.up >= 0) ch.from_parent = recvFrom(t.up);
    ch.parent_on_ring = ring_shares_send && t.up == (self + 1) % nranks;
    if (t.up >= 0 && !ch.parent_on_ring) ch.to_parent = sendTo(t.up);
    for (int d : t.down)
      if (d >= 0) ch.to_children.push_back(sendTo(d));
  }
  return out;
}

void closeTree(std::vector<TreeChannelConns>& conns) {
  for (TreeChannelConns& c : conns) {
    for (void* s : c.to_children) EXPECT_EQ(plugin::net::closeSend(s), nccl::ncclSuccess);
    for (void* r : c.from_children) EXPECT_EQ(plugin::net::closeRecv(r), nccl::ncclSuccess);
    if (c.to_parent) {
      EXPECT_EQ(plugin::net::closeSend(c.to_parent), nccl::ncclSuccess);
    }
    if (c.from_parent) {
      EXPECT_EQ(plugin::net::closeRecv(c.from_parent), nccl::ncclSuccess);
    }
    closeConns(c.accepted);
  }
  conns.clear();
}

TreeRun runTreeAllReduce(std::vector<TreeChannelConns>& conns, std::uint64_t bytes, int channels,
                         live::TimeNs start) {
  const TreeChunks chunks = treeChunks(bytes, channels);
  const long units = chunks.units;
  const auto step = static_cast<std::size_t>(std::max(1.0, std::round(chunks.unit_bytes)));
  std::vector<Channel> ch(static_cast<std::size_t>(channels));
  for (int c = 0; c < channels; ++c) {
    TreeChannelConns& tc = conns[static_cast<std::size_t>(c)];
    Channel& x = ch[static_cast<std::size_t>(c)];
    x.has_parent = tc.from_parent != nullptr;
    x.sends_up = tc.to_parent != nullptr;
    if (x.sends_up) x.up_send.comm = &dataComm(tc.to_parent);
    if (x.has_parent) x.down_recv.comm = &dataComm(tc.from_parent);
    for (void* s : tc.to_children) x.down_sends.push_back(Conn{&dataComm(s), {}, 0, 0});
    for (void* r : tc.from_children) x.up_recvs.push_back(Conn{&dataComm(r), {}, 0, 0});
  }
  TreeRun out;
  out.start = start;
  live::TimeNs now = start;
  auto allDone = [&](const Channel& x) {
    bool done = x.reduced == units && x.forwarded == units;
    if (x.sends_up) done = done && x.up_send.done == units;
    if (x.has_parent) done = done && x.down_recv.done == units;
    for (const Conn& c : x.down_sends) done = done && c.done == units;
    return done;
  };
  for (;;) {
    bool progress = true;
    int finished = 0;
    while (progress) {
      progress = false;
      finished = 0;
      for (Channel& x : ch) {
        for (Conn& c : x.up_recvs)
          if (testOldest(c, now)) {
            progress = true;
            out.last_recv = now;
          }
        if (x.has_parent && testOldest(x.down_recv, now)) {
          progress = true;
          out.last_recv = now;
        }
        if (x.sends_up) progress |= testOldest(x.up_send, now);
        for (Conn& c : x.down_sends) progress |= testOldest(c, now);
        // Up: chunk `reduced` once every child's arrived; sent up (credit permitting).
        while (x.reduced < units) {
          bool ready = true;
          for (const Conn& c : x.up_recvs) ready = ready && c.done > x.reduced;
          if (!ready) break;
          if (x.sends_up) {
            if (x.up_send.posted >= x.up_send.done + kStepsInFlight) break;
            post(x.up_send, true, step, now, &out.requests);
          }
          ++x.reduced;
          progress = true;
        }
        // Down: chunk `forwarded` once the parent's arrived (root: once reduced), sent to
        // every child (credit permitting).
        while (x.forwarded < units &&
               (x.has_parent ? x.down_recv.done > x.forwarded : x.reduced > x.forwarded)) {
          bool credit = true;
          for (const Conn& c : x.down_sends) credit = credit && c.posted < c.done + kStepsInFlight;
          if (!credit) break;
          for (Conn& c : x.down_sends) post(c, true, step, now, &out.requests);
          ++x.forwarded;
          progress = true;
        }
        // Receive slots are reposted once the GPU consumed the chunk they held.
        for (Conn& c : x.up_recvs)
          while (c.posted < units && c.posted < x.reduced + kStepsInFlight) {
            post(c, false, static_cast<std::size_t>(kStepBytes), now, &out.requests);
            progress = true;
          }
        if (x.has_parent)
          while (x.down_recv.posted < units && x.down_recv.posted < x.forwarded + kStepsInFlight) {
            post(x.down_recv, false, static_cast<std::size_t>(kStepBytes), now, &out.requests);
            progress = true;
          }
        if (allDone(x)) ++finished;
      }
    }
    if (finished == channels) break;
    live::TimeNs next = Request::kUnknown;
    auto consider = [&](const Conn& c) {
      if (!c.out.empty()) next = std::min(next, c.out.front()->due);
    };
    for (const Channel& x : ch) {
      if (x.sends_up) consider(x.up_send);
      if (x.has_parent) consider(x.down_recv);
      for (const Conn& c : x.up_recvs) consider(c);
      for (const Conn& c : x.down_sends) consider(c);
    }
    advanceClock(now, next, out.unknown_waits);  // unknown: only the stall bound resolves it
  }
  out.end = now;
  return out;
}

}  // namespace crystal::test
