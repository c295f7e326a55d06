// The plugin's state outlives static destruction (exit_order_probe.cc): NCCL's proxy thread
// and the P2P pacing threads call in while a program exits without destroying its
// communicators. Under AddressSanitizer a destroyed table would be a use after free.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

TEST(ExitOrder, PluginCallsDuringExitFindItsStateAlive) {
  FILE* p = ::popen(EXIT_ORDER_PROBE " 2>&1", "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  const int st = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(st)) << out;
  EXPECT_EQ(WEXITSTATUS(st), 0) << out;
  EXPECT_NE(out.find("the plugin answered after static destruction"), std::string::npos) << out;
}
