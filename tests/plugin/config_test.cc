// CRYSTAL_CONFIG is read through crystal::loadConfig: the NICs and the tuner switch follow
// the YAML; a bad file is an InputError naming it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "crystal/base/error.h"
#include "state.h"

namespace crystal::plugin {
namespace {

std::string writeTemp(const std::string& text) {
  char path[] = "/tmp/crystal-plugin-config-XXXXXX.yaml";
  const int fd = mkstemps(path, 5);
  EXPECT_GE(fd, 0);
  std::ofstream(path) << text;
  close(fd);
  return path;
}

TEST(PluginConfig, NicsAndTunerFollowTheYaml) {
  const std::string path = writeTemp(
      "cluster:\n  nodes: 2\n  fabric:\n    nics_per_node: 4\n"
      "    nic: {bandwidth_GBps: 25, latency_us: 3}\n"
      "job:\n  layout: {tp: 8, dp: 2}\nworkload:\n  kind: dense\n  layers: 2\n  hidden: 1024\n"
      "  heads: 8\n  vocab: 1000\n  seq_len: 128\nemulation:\n  real_ranks: [0]\n  tuner: false\n");
  setenv("CRYSTAL_CONFIG", path.c_str(), 1);
  PluginState& st = PluginState::get();
  st.ensureInit();
  unsetenv("CRYSTAL_CONFIG");
  std::remove(path.c_str());
  EXPECT_EQ(st.ndev(), 4);
  EXPECT_EQ(st.nic(0).speed_mbps, 200000);
  EXPECT_EQ(st.nic(3).name, "crystal3");
  EXPECT_FALSE(st.tunerEnabled());
  EXPECT_GE(st.link().ns_per_byte, 1.0 / 25.0);  // never faster than the NIC's line rate
}

TEST(PluginConfig, MissingFileIsInputError) {
  setenv("CRYSTAL_CONFIG", "/nonexistent/crystal.yaml", 1);
  EXPECT_THROW((void)loadTargetConfig(), InputError);
  unsetenv("CRYSTAL_CONFIG");
}

}  // namespace
}  // namespace crystal::plugin
