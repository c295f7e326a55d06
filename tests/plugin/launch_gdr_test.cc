// What `crystal emulate` gives the real ranks for GDR (replay/control/launch_env.cc):
// NCCL_NET_GDR_LEVEL=SYS and NCCL_NET_GDR_READ=1 by default when emulation.gdr is on, the
// caller's own values kept, nothing when it is off.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "crystal/control/emulation_host.h"

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
