// CPU stand-in for NCCL's proxy and a GPU (instantaneous, or with a turnaround per step),
// driving the plugin's connections to virtual peers on a virtual clock, to check that a real rank's
// ring collective takes the time `crystal simulate`'s model predicts (docs/plugin.md "Timing
// checked against the model").
//
// Connections are made through the plugin's net API as NCCL's proxy makes them: connect() on
// the VirtualPeer handle the host forges for the next rank, listen() + accept() of a Hello the
// host (this harness) sends for the previous rank, each carrying the connection identity
// (graph, distance, channel ordinal). The data path then calls the comms' isend/irecv/test
// with the virtual clock (the same code net::isend/irecv/test run after reading the real
// clock), as NCCL's Simple protocol does it: per channel at most NCCL_STEPS = 8 steps in
// flight, one request per slice of sliceSteps = 2 steps, slices/chunks as calcCollChunking.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/model/nccl_model.h"

namespace crystal::test {

// One ring channel of the real rank: send to next, receive from prev (plugin comm tokens).
struct RingConns {
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;
  int host_fd = -1;  // the host's Hello stream, kept open like the host does
};

// One connection to a virtual peer as NCCL's exchange names it.
struct ConnId {
  std::uint64_t comm_id = 0;
  int self = 0;  // the real rank
  int peer = 0;  // the virtual rank
  int nranks = 0;
  int distance = 1;
  int ordinal = 0;  // channel ordinal in the exchange
  int graph = 1;    // setup tag graph byte (1 ring, 2 tree, 0 p2p)
};

// Opens a send connection (VirtualPeer handle) / a receive connection (Hello) to a virtual
// peer. Test failures are reported through GoogleTest.
[[nodiscard]] void* connectVirtual(void* ctx, int dev, const ConnId& id);
[[nodiscard]] void* acceptVirtual(void* ctx, int dev, const ConnId& id, void** listen,
                                  int* host_fd);
void closeConns(std::vector<RingConns>& conns);

struct RingRun {
  live::TimeNs start = 0;
  live::TimeNs end = 0;    // last request of the real rank completed
  long unknown_waits = 0;  // times no request had a known completion (should stay 0)
  long requests = 0;
};

// A real rank slower than an instantaneous GPU: what its proxy + GPU take per step.
struct Turnaround {
  // A send is posted this long after its data became ready (the operation's start for the
  // first step, else the receive it forwards completed): completion -> proxy -> GPU sees
  // the tail -> GPU writes -> proxy sees it -> isend.
  live::TimeNs send_ns = 0;
  // A receive slot is reposted this long after its receive completed (the GPU consumed it
  // and the proxy saw its head credit).
  live::TimeNs consume_ns = 0;
};

// One step of a proxy harness's virtual clock: to `next`, the earliest known completion or
// GPU action (at least 1 ns on), or 1 us on when none is known (counted in `unknown_waits`:
// only a timing fallback can resolve that).
void advanceClock(live::TimeNs& now, live::TimeNs next, long& unknown_waits);

// Requests per connection of one ring collective on `nch` channels (runRingCollective's
// chunking): what NCCL's profiler announces per proxy operation.
[[nodiscard]] long ringUnits(model::Func f, std::uint64_t bytes, int nch, int nranks);

// Runs one ring collective (AllReduce, AllGather or ReduceScatter) of `bytes` over the
// channels in `conns` starting at virtual time `start`.
[[nodiscard]] RingRun runRingCollective(std::vector<RingConns>& conns, model::Func f,
                                        std::uint64_t bytes, int nranks, live::TimeNs start,
                                        Turnaround turnaround = {});

}  // namespace crystal::test
