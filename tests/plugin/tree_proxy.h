// CPU stand-in for NCCL's proxy and an instantaneous GPU running a tree all-reduce (Simple)
// of a real rank whose tree neighbours are virtual, on a virtual clock (docs/plugin.md
// "Tree all-reduce checked against the model").
//
// Connections are those NCCL builds when every rank is alone on its emulated host: the
// double binary tree over all ranks, channels [0, n) on tree 0 and [n, 2n) on tree 1
// (graph/connect.cc), each connection named as the host's exchange names it (graph 2, the
// distance to the peer, the k-th channel that connects to that peer). The proxy posts as
// NCCL's does: per connection at most NCCL_STEPS = 8 steps in flight, one request per step
// (tree chunkSteps = sliceSteps = 1), a chunk of calcCollChunking's size per step. The GPU
// sends chunk u up once every child's chunk u arrived (a leaf at once), and down to its
// children once its parent's chunk u arrived (the root: once it reduced u).
#pragma once

#include <cstdint>
#include <vector>

#include "crystal/live/clock.h"
#include "ring_proxy.h"

namespace crystal::test {

struct TreeChannelConns {
  void* to_parent = nullptr;
  void* from_parent = nullptr;
  bool parent_on_ring = false;  // the send to the parent is the ring's connection
  std::vector<void*> to_children, from_children;
  std::vector<RingConns> accepted;  // listen comms and host streams of the receives
};

// Connects `channels` tree channels (rounded up to an even count: NCCL duplicates its
// channels, one half per tree) of real rank `self` among `nranks`. `ring_shares_send`: a send
// to the parent that is also the ring's next is not made (NCCL reuses the ring's connection
// of the channel, connIndex 0 for both); the GPU's sends up then go elsewhere.
[[nodiscard]] std::vector<TreeChannelConns> connectTree(void* ctx, std::uint64_t comm_id, int self,
                                                        int nranks, int channels,
                                                        bool ring_shares_send = false);
void closeTree(std::vector<TreeChannelConns>& conns);

struct TreeRun {
  live::TimeNs start = 0;
  live::TimeNs end = 0;        // the last request of the real rank completed
  live::TimeNs last_recv = 0;  // the last receive completed: the result is at the rank
  long unknown_waits = 0;      // times no request had a known completion
  long requests = 0;
};

// One tree all-reduce of `bytes` on the first `channels` channels of `conns`, from `start`.
[[nodiscard]] TreeRun runTreeAllReduce(std::vector<TreeChannelConns>& conns, std::uint64_t bytes,
                                       int channels, live::TimeNs start);

// calcCollChunking for a tree all-reduce (Simple): steps per channel and bytes per step.
struct TreeChunks {
  long units = 1;
  double unit_bytes = 0;
};
[[nodiscard]] TreeChunks treeChunks(std::uint64_t bytes, int channels);

}  // namespace crystal::test
