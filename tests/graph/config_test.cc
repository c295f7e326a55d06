// Config loading: defaults, presets, derived fields, and one clear error per bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "crystal/config/config.h"

namespace crystal {
namespace {

using ::testing::HasSubstr;

std::string errorOf(const std::string& yaml) {
  try {
    (void)parseConfig(yaml, "t.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

constexpr const char* kSmall = R"(
job: {world_size: 16, layout: {tp: 2, pp: 2, dp: 4}}
workload: {kind: dense, layers: 4, hidden: 256, heads: 4, vocab: 1000, seq_len: 128}
)";

TEST(Config, DefaultsAndDerivedFields) {
  const Config c = parseConfig(kSmall, "t.yaml");
  EXPECT_EQ(c.source, "t.yaml");
  EXPECT_EQ(c.cluster.gpus_per_node, 8);
  EXPECT_EQ(c.cluster.nodes, 2);  // derived from world 16 / 8 GPUs per node
  EXPECT_EQ(c.cluster.gpu.model, "H200");
  EXPECT_DOUBLE_EQ(c.cluster.fabric.nic.bandwidth_GBps, 50.0);
  EXPECT_EQ(c.job.layout.order, "tp-cp-ep-dp-pp");
  EXPECT_EQ(c.workload.micro_batches, 1);
  EXPECT_TRUE(c.workload.distributed_optimizer);
  EXPECT_EQ(c.emulation.data, DataPolicy::Mirror);
  EXPECT_FALSE(c.model.max_channels.has_value());
}

TEST(Config, DpAndWorldDerived) {
  const Config c = parseConfig(R"(
cluster: {nodes: 4}
job: {layout: {tp: 8, pp: 2}}
workload: {layers: 4, hidden: 256, heads: 8, vocab: 10, seq_len: 16}
)", "t.yaml");
  EXPECT_EQ(c.job.world_size, 32);
  EXPECT_EQ(c.job.layout.dp, 2);
}

TEST(Config, PresetThenOverride) {
  const Config c = parseConfig(R"(
cluster: {preset: h100-dgx-ib, nodes: 2, gpu: {memory_GiB: 94}}
job: {layout: {tp: 8, dp: 2}}
workload: {layers: 4, hidden: 256, heads: 8, vocab: 10, seq_len: 16}
model: {max_channels: 16, overrides: {nvls: 0}}
)", "t.yaml");
  EXPECT_EQ(c.cluster.gpu.model, "H100");
  EXPECT_DOUBLE_EQ(c.cluster.gpu.hbm_GBps, 3350.0);
  EXPECT_DOUBLE_EQ(c.cluster.gpu.memory_GiB, 94.0);
  EXPECT_EQ(c.model.max_channels, 16);
  ASSERT_EQ(c.model.overrides.size(), 1u);
  EXPECT_EQ(c.model.overrides[0].first, "nvls");
}

TEST(Config, UnknownFieldNamesFileLineAndSection) {
  EXPECT_EQ(errorOf("cluster:\n  fabric:\n    nics: 8\n"),
            "t.yaml:3: unknown field 'nics' in 'cluster.fabric'");
  EXPECT_EQ(errorOf("jobs: {}\n"), "t.yaml:1: unknown field 'jobs' in '<top level>'");
}

TEST(Config, MalformedYamlNamesLine) {
  EXPECT_THAT(errorOf("job: {world_size: 16\nworkload: ["), HasSubstr("t.yaml:"));
  EXPECT_THAT(errorOf("job: {world_size: 16\nworkload: ["), HasSubstr("malformed YAML"));
}

TEST(Config, WrongTypesAndNegativeSizes) {
  EXPECT_THAT(errorOf("job: {world_size: many}"),
              HasSubstr("t.yaml:1: 'job.world_size' must be an integer, got 'many'"));
  EXPECT_THAT(errorOf("workload: {dp_bucket_bytes: -5}"),
              HasSubstr("'workload.dp_bucket_bytes' must be a non-negative integer, got -5"));
  EXPECT_THAT(errorOf("cluster: {gpu: [1, 2]}"), HasSubstr("'cluster.gpu' must be a mapping"));
  EXPECT_THAT(errorOf(std::string(kSmall) + "emulation: {real_ranks: [0, 99]}"),
              HasSubstr("'emulation.real_ranks': rank 99 outside 0..15"));
  EXPECT_THAT(errorOf(std::string(kSmall) + "emulation: {data: maybe}"),
              HasSubstr("'emulation.data' must be mirror, zero or none"));
  EXPECT_THAT(errorOf(std::string(kSmall) + "emulation: {real_channels: 65}"),
              HasSubstr("'emulation.real_channels': 65 outside 0..64"));
  EXPECT_THAT(errorOf(std::string(kSmall) + "emulation: {real_channels: -1}"),
              HasSubstr("'emulation.real_channels': -1 outside 0..64"));
  EXPECT_THAT(
      errorOf(std::string(kSmall) +
              "cluster: {nodes: 16, gpus_per_node: 1}\nemulation: {p2p_peers: true}"),
      HasSubstr("'cluster.gpus_per_node' is 1: no node has other GPUs"));
}

TEST(Config, LayoutMustDivideWorld) {
  EXPECT_THAT(errorOf(R"(
job: {world_size: 16, layout: {tp: 2, pp: 2, dp: 3}}
workload: {layers: 4, hidden: 256, heads: 4, vocab: 10, seq_len: 16})"),
              HasSubstr("tp*cp*dp*pp = 2*1*3*2 = 12 differs from 'job.world_size' = 16"));
  EXPECT_THAT(errorOf(R"(
job: {world_size: 16, layout: {tp: 2, pp: 2, dp: 4, ep: 3}}
workload: {layers: 4, hidden: 256, heads: 4, vocab: 10, seq_len: 16})"),
              HasSubstr("'job.layout.ep' = 3 does not divide 'job.layout.dp' = 4"));
  EXPECT_THAT(errorOf(R"(
job: {world_size: 16, layout: {tp: 2, pp: 4, dp: 2}}
workload: {layers: 6, hidden: 256, heads: 4, vocab: 10, seq_len: 16})"),
              HasSubstr("'job.layout.pp' = 4 does not divide 'workload.layers' = 6"));
}

TEST(Config, BadOrder) {
  const std::string head = "job: {world_size: 16, layout: {tp: 2, pp: 2, dp: 4, order: ";
  const std::string tail = "}}\nworkload: {layers: 4, hidden: 256, heads: 4, vocab: 10, seq_len: 16}";
  EXPECT_THAT(errorOf(head + "tp-xx-dp-pp" + tail), HasSubstr("unknown token 'xx'"));
  EXPECT_THAT(errorOf(head + "tp-dp-tp-pp" + tail), HasSubstr("repeated token 'tp'"));
  EXPECT_THAT(errorOf(head + "tp-dp" + tail), HasSubstr("leaves out 'pp' of size 2"));
  EXPECT_NO_THROW((void)parseConfig(head + "pp-dp-tp" + tail, "t.yaml"));
}

TEST(Config, ExplicitCommsChecked) {
  const std::string wl = "workload: {layers: 4, hidden: 256, heads: 4, vocab: 10, seq_len: 16}\n";
  EXPECT_THAT(errorOf(wl + "job: {world_size: 16, comms: [{name: a, ranks: [1, 2, 1]}]}"),
              HasSubstr("'job.comms[0].ranks' ('a'): rank 1 listed twice"));
  EXPECT_THAT(errorOf(wl + "job: {world_size: 16, comms: [{name: a, ranks: [1, 16]}]}"),
              HasSubstr("rank 16 outside 0..15"));
  EXPECT_THAT(errorOf(wl + "job: {world_size: 16, comms: [{ranks: [1, 2]}]}"),
              HasSubstr("'job.comms[0].name' is required"));
}

TEST(Config, CanonicalYamlRoundTrips) {
  for (const char* f : {"llama3-70b-8192.yaml", "dense-8gpu.yaml", "moe-mixtral-1024.yaml",
                        "moe-deepseek-cp-2048.yaml"}) {
    const Config c = loadConfig(std::string(CRYSTAL_SOURCE_DIR) + "/config/examples/" + f);
    Config back = parseConfig(toYaml(c), c.source);
    EXPECT_EQ(back, c) << f << "\n" << toYaml(c);
  }
  // Emulation switches away from their defaults survive the round trip.
  Config c = loadConfig(std::string(CRYSTAL_SOURCE_DIR) + "/config/examples/dense-8gpu.yaml");
  c.emulation.target_channels = false;
  c.emulation.gdr = false;
  c.emulation.fold_rings = false;
  c.emulation.gpu_channel_GBps = 21.5;
  c.emulation.proxy_request_us = 0.75;
  c.emulation.gpu_slice_us = 2.25;
  c.emulation.real_channels = 32;
  c.emulation.p2p_peers = true;
  EXPECT_EQ(parseConfig(toYaml(c), c.source), c) << toYaml(c);
}

TEST(Config, MissingFileIsInputError) {
  EXPECT_THROW((void)loadConfig("/nonexistent/x.yaml"), InputError);
}

}  // namespace
}  // namespace crystal
