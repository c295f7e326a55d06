// What `crystal emulate` gives the real ranks for GDR (replay/control/launch_env.cc):
// NCCL_NET_GDR_LEVEL=SYS and NCCL_NET_GDR_READ=1 by default when emulation.gdr is on, the
// caller's own values kept, nothing when it is off.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "crystal/control/emulation_host.h"
#include "crystal/control/graph_file.h"

namespace crystal::test {
namespace {

std::optional<std::string> find(const control::EnvList& env, const std::string& name) {
  for (const auto& [k, v] : env)
    if (k == name) return v;
  return std::nullopt;
}

control::EnvList envFor(bool gdr) {
  Config c;
  c.emulation.gdr = gdr;
  return control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/libnccl-net-crystal.so", 1);
}

TEST(LaunchGdr, DefaultsLetNcclUseGdrOnCrystalsNics) {
  ::unsetenv("NCCL_NET_GDR_LEVEL");
  ::unsetenv("NCCL_NET_GDR_READ");
  const auto env = envFor(true);
  EXPECT_EQ(find(env, "NCCL_NET_GDR_LEVEL"), "SYS");
  EXPECT_EQ(find(env, "NCCL_NET_GDR_READ"), "1");
}

TEST(LaunchGdr, TheCallersValuesWin) {
  ::setenv("NCCL_NET_GDR_LEVEL", "PHB", 1);
  ::setenv("NCCL_NET_GDR_READ", "0", 1);
  const auto env = envFor(true);
  EXPECT_EQ(find(env, "NCCL_NET_GDR_LEVEL"), "PHB");
  EXPECT_EQ(find(env, "NCCL_NET_GDR_READ"), "0");
  ::unsetenv("NCCL_NET_GDR_LEVEL");
  ::unsetenv("NCCL_NET_GDR_READ");
}

TEST(LaunchGdr, NothingWhenGdrIsOff) {
  const auto env = envFor(false);
  EXPECT_FALSE(find(env, "NCCL_NET_GDR_LEVEL").has_value());
  EXPECT_FALSE(find(env, "NCCL_NET_GDR_READ").has_value());
}

}  // namespace
}  // namespace crystal::test

// The real rank's NCCL gets the target's channel count (the model's commChannels for the
// world) as NCCL_MIN_NCHANNELS, so its GPU runs as many CTAs as a target rank would.
namespace crystal::test {
namespace {

TEST(LaunchChannels, MinChannelsIsTheTargetsWorldChannelCount) {
  ::unsetenv("NCCL_MIN_NCHANNELS");
  Config c;  // built-in H200 nodes of 8 GPUs, 8 NICs of 50 GB/s
  c.cluster.nodes = 8;
  c.job.world_size = 64;
  c.emulation.target_channels = false;
  EXPECT_FALSE(find(control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1),
                    "NCCL_MIN_NCHANNELS"));
  c.emulation.target_channels = true;  // the default
  c.emulation.real_channels = 0;
  const auto env = control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1);
  // 8 x 8 H200: 16 ring channels, as crystal simulate reports (Ring/Simple/16 at 1 GiB).
  EXPECT_EQ(find(env, "NCCL_MIN_NCHANNELS"), "16");
  EXPECT_FALSE(find(env, "NCCL_MAX_P2P_NCHANNELS"));
  // More real channels than the target's (emulation.real_channels): p2p keeps the target's 16.
  c.emulation.real_channels = 32;
  const auto more = control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1);
  EXPECT_EQ(find(more, "NCCL_MIN_NCHANNELS"), "32");
  EXPECT_EQ(find(more, "NCCL_MAX_P2P_NCHANNELS"), "16");
  // Fewer than the target's: the target's.
  c.emulation.real_channels = 8;
  const auto fewer = control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1);
  EXPECT_EQ(find(fewer, "NCCL_MIN_NCHANNELS"), "16");
  EXPECT_FALSE(find(fewer, "NCCL_MAX_P2P_NCHANNELS"));
  // Under p2p_peers a one-node comm (a split into whole nodes) runs on its own target's 28.
  c.emulation.real_channels = 0;
  c.emulation.p2p_peers = true;
  const auto node = control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1);
  EXPECT_EQ(find(node, "NCCL_MIN_NCHANNELS"), "28");
  EXPECT_EQ(find(node, "NCCL_MAX_P2P_NCHANNELS"), "16");
  c.emulation.real_channels = 32;
  EXPECT_EQ(find(control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1),
                 "NCCL_MIN_NCHANNELS"),
            "32");
  c.emulation.p2p_peers = false;
  ::setenv("NCCL_MIN_NCHANNELS", "2", 1);
  EXPECT_EQ(find(control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1),
                 "NCCL_MIN_NCHANNELS"),
            "2");  // the caller's value wins
  ::unsetenv("NCCL_MIN_NCHANNELS");
}

}  // namespace
}  // namespace crystal::test

// emulation.p2p_peers: NCCL keeps runtime connect (the P2P channels to virtual node members
// connect at the first collective), never trades P2P for NET inside the node, and allows P2P
// at any PCI distance, and the real rank's process offers memory for those connections
// (CRYSTAL_P2P_POOL); without it every channel connects at init.
namespace crystal::test {
namespace {

TEST(LaunchP2pPeers, RuntimeConnectAndP2pInsideTheNode) {
  for (const char* v :
       {"NCCL_P2P_LEVEL", "NCCL_IGNORE_DISABLED_P2P", "NCCL_WIN_ENABLE", "CRYSTAL_P2P_POOL",
        "NCCL_PROTO", "NCCL_P2P_LL_THRESHOLD"})
    ::unsetenv(v);
  Config c;
  auto env = control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/x.so", 1);
  EXPECT_EQ(find(env, "NCCL_RUNTIME_CONNECT"), "0");
  EXPECT_FALSE(find(env, "NCCL_NET_DISABLE_INTRA").has_value());
  EXPECT_FALSE(find(env, "NCCL_P2P_LEVEL").has_value());
  EXPECT_FALSE(find(env, "CRYSTAL_P2P_POOL").has_value());
  EXPECT_FALSE(find(env, "NCCL_PROTO").has_value()) << "NCCL chooses protocols";
  EXPECT_FALSE(find(env, "CRYSTAL_GRAPH_DIR").has_value());
  c.emulation.p2p_peers = true;
  env = control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/x.so", 1);
  EXPECT_FALSE(find(env, "NCCL_RUNTIME_CONNECT").has_value());
  EXPECT_EQ(find(env, "NCCL_NET_DISABLE_INTRA"), "1");
  EXPECT_EQ(find(env, "NCCL_P2P_LEVEL"), "SYS");
  EXPECT_EQ(find(env, "NCCL_IGNORE_DISABLED_P2P"), "2");
  EXPECT_EQ(find(env, "NCCL_WIN_ENABLE"), "0");
  EXPECT_EQ(find(env, "CRYSTAL_P2P_POOL"), "64,64");  // the connections' memory
  // Simple only: no one writes LL/LL128 flags for those GPUs (a hang otherwise).
  EXPECT_EQ(find(env, "NCCL_PROTO"), "Simple");
  EXPECT_EQ(find(env, "NCCL_P2P_LL_THRESHOLD"), "0");
  // The node's ring and tree graphs come from the host (host/node_graph.h).
  EXPECT_EQ(find(env, "CRYSTAL_GRAPH_DIR"), control::graphDir(1));
  ::setenv("NCCL_P2P_LEVEL", "NVL", 1);  // the caller's value wins
  env = control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/x.so", 1);
  EXPECT_EQ(find(env, "NCCL_P2P_LEVEL"), "NVL");
  ::unsetenv("NCCL_P2P_LEVEL");
}

}  // namespace
}  // namespace crystal::test
