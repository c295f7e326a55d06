// Which NCCL protocols can run on the P2P connections to the virtual GPUs of a real rank's
// node (emulation.p2p_peers): only Simple, whose counters the pacing agent moves.
#pragma once

#include <optional>
#include <string>

namespace crystal::plugin {

// NCCL's LL and LL128 receivers wait on flags that the sender writes into the receiver's own
// buffer with the data. For a virtual GPU of this node no one writes them (only the Simple
// counters are moved), so such a receive would wait for ever. NCCL 2.28.9 runs LL or LL128
// for a collective when NCCL_PROTO allows it (its tuner may then pick it), and LL for a
// send/recv of up to NCCL_P2P_LL_THRESHOLD bytes per channel (default 16384; enqueue.cc)
// whatever NCCL_PROTO says. Given those two variables (nullptr: unset), returns why they let
// LL or LL128 run, or nullopt (`crystal emulate` sets Simple and 0 under p2p_peers).
[[nodiscard]] std::optional<std::string> p2pProtocolProblem(const char* nccl_proto,
                                                            const char* p2p_ll_threshold);

}  // namespace crystal::plugin
