// plugin/p2p_protocol.h: under emulation.p2p_peers only Simple may run on the P2P
// connections to the node's virtual GPUs.
#include <gtest/gtest.h>

#include "p2p_protocol.h"

namespace crystal::plugin {
namespace {

// Which NCCL_PROTO / NCCL_P2P_LL_THRESHOLD let NCCL run LL or LL128 (graph/tuning.cc
// parseList's syntax; enqueue.cc's p2p threshold, 16384 unset).
TEST(P2pProtocol, OnlySimpleAndNoP2pLlPass) {
  EXPECT_FALSE(p2pProtocolProblem("Simple", "0"));
  EXPECT_FALSE(p2pProtocolProblem("simple", "0"));
  EXPECT_FALSE(p2pProtocolProblem("^LL,LL128", "0"));
  EXPECT_FALSE(p2pProtocolProblem("^ll128,LL", "0"));
  EXPECT_FALSE(p2pProtocolProblem("Simple;allreduce:Simple", "0"));
  EXPECT_TRUE(p2pProtocolProblem(nullptr, "0"));
  EXPECT_TRUE(p2pProtocolProblem("", "0"));
  EXPECT_TRUE(p2pProtocolProblem("LL", "0"));
  EXPECT_TRUE(p2pProtocolProblem("Simple,LL128", "0"));
  EXPECT_TRUE(p2pProtocolProblem("^LL", "0")) << "LL128 stays on";
  EXPECT_TRUE(p2pProtocolProblem("^", "0")) << "nothing excluded";
  EXPECT_TRUE(p2pProtocolProblem("Simple;allreduce:LL", "0"));
  EXPECT_TRUE(p2pProtocolProblem("Simple", nullptr)) << "16384 by default";
  EXPECT_TRUE(p2pProtocolProblem("Simple", "4096"));
  EXPECT_TRUE(p2pProtocolProblem("Simple", "x"));
  const auto why = p2pProtocolProblem("Simple", nullptr);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("NCCL_P2P_LL_THRESHOLD"), std::string::npos) << *why;
}

}  // namespace
}  // namespace crystal::plugin
