// The built library exports exactly the versioned tables (plus the interposer's NCCL entry
// points) and each version reports the target's NICs.
#include <cstdio>
#include <set>
#include <cstdlib>
#include <string>

#include "abi_harness.h"

namespace crystal::test {
namespace {

TEST(PluginAbi, ExportsOnlyVersionedTables) {
  const std::string cmd = std::string("nm -D --defined-only ") + CRYSTAL_PLUGIN_PATH;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::set<std::string> syms;
  char line[512];
  while (fgets(line, sizeof line, p)) {
    char addr[64], type[8], name[400];
    if (std::sscanf(line, "%63s %7s %399s", addr, type, name) == 3) syms.insert(name);
  }
  pclose(p);
  const std::set<std::string> required = {"ncclNetPlugin_v8",   "ncclNetPlugin_v9",
                                          "ncclNetPlugin_v10",  "ncclNetPlugin_v11",
                                          "ncclTunerPlugin_v3", "ncclTunerPlugin_v4",
                                          "ncclTunerPlugin_v5"};
  for (const auto& r : required) EXPECT_TRUE(syms.count(r)) << r;
  // The host's interposer (plugin/interpose/) may add NCCL's communicator entry points and the
  // calls its rank mapping and mirror results rewrite; the profiler plugin its table (plugin/exports.map).
  auto interposer = [](const std::string& s) {
    static const std::set<std::string> mapped = {
        "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclSend",
        "ncclRecv",      "ncclBroadcast",     "ncclReduce",   "ncclProfiler_v5",
        "ncclBcast",     "ncclAllReduce",     "ncclGroupStart", "ncclGroupEnd",
        "ncclGroupSimulateEnd", "ncclRedOpCreatePreMulSum"};
    return s == "ncclGetUniqueId" || s.rfind("ncclComm", 0) == 0 || mapped.count(s) > 0;
  };
  for (const auto& s : syms)
    EXPECT_TRUE(required.count(s) || interposer(s)) << "unexpected export " << s;
}

TEST(PluginAbi, EveryVersionResolvesAndNamesItselfCrystal) {
  Plugin& pl = Plugin::get();
  ASSERT_NE(pl.dl, nullptr) << dlerror();
  ASSERT_TRUE(pl.v11 && pl.v10 && pl.v9 && pl.v8 && pl.t5 && pl.t4 && pl.t3);
  for (const char* n : {pl.v11->name, pl.v10->name, pl.v9->name, pl.v8->name, pl.t5->name,
                        pl.t4->name, pl.t3->name})
    EXPECT_STREQ(n, "crystal");
  EXPECT_EQ(pl.v11->makeVDevice, nullptr);
}

TEST(PluginAbi, V11ReportsTargetNics) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  ASSERT_NE(n, nullptr);
  void* ctx = nullptr;
  ASSERT_EQ(n->init(&ctx, 0x1234, nullptr, testLogger, nullptr), ncclSuccess);
  ASSERT_NE(ctx, nullptr);
  int ndev = 0;
  ASSERT_EQ(n->devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 8);
  for (int d = 0; d < ndev; ++d) {
    ncclNetProperties_v11_t p{};
    ASSERT_EQ(n->getProperties(d, &p), ncclSuccess);
    EXPECT_EQ(std::string(p.name), "crystal" + std::to_string(d));
    EXPECT_EQ(p.speed, 400000);  // Mb/s
    EXPECT_FLOAT_EQ(p.latency, static_cast<float>(targetLink().latency_ns / 1e3));
    // The default GDR rule (config.h gdrEnabled): GPU buffers only under data `none`.
    const char* data = std::getenv("CRYSTAL_DATA");
    const bool gdr = data != nullptr && std::string(data) == "none";
    EXPECT_EQ(p.ptrSupport, gdr ? (NCCL_PTR_HOST | NCCL_PTR_CUDA) : NCCL_PTR_HOST);
    EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
    EXPECT_EQ(p.maxRecvs, 8);
    EXPECT_EQ(p.maxP2pBytes, std::size_t{1} << 40);
    EXPECT_EQ(p.maxCollBytes, std::size_t{1} << 40);
    EXPECT_EQ(p.maxMultiRequestSize, 1);
    EXPECT_GT(p.maxComms, 0);
    EXPECT_EQ(p.regIsGlobal, 0);
  }
  EXPECT_TRUE(logged("built-in target"));
  EXPECT_TRUE(logged("real peers use TCP") || logged("RDMA device"));
  EXPECT_EQ(n->finalize(ctx), ncclSuccess);
}

TEST(PluginAbi, OlderVersionsReportTheSameNics) {
  Plugin& pl = Plugin::get();
  ASSERT_EQ(pl.v10->init(testLogger, nullptr), ncclSuccess);
  ASSERT_EQ(pl.v8->init(testLogger), ncclSuccess);
  ncclNetProperties_v10_t p10{};
  ASSERT_EQ(pl.v10->getProperties(3, &p10), ncclSuccess);
  EXPECT_STREQ(p10.name, "crystal3");
  EXPECT_EQ(p10.maxP2pBytes, std::size_t{1} << 40);
  EXPECT_EQ(p10.speed, 400000);
  ncclNetProperties_v9_t p9{};
  ASSERT_EQ(pl.v9->getProperties(0, &p9), ncclSuccess);
  EXPECT_EQ(p9.maxRecvs, 8);
  ncclNetProperties_v8_t p8{};
  ASSERT_EQ(pl.v8->getProperties(7, &p8), ncclSuccess);
  EXPECT_STREQ(p8.name, "crystal7");
  EXPECT_EQ(p8.speed, 400000);
  EXPECT_EQ(p8.maxRecvs, 8);
  EXPECT_EQ(p8.netDeviceType, NCCL_NET_DEVICE_HOST);
}

TEST(PluginAbi, TunerFillsCostTableForTheTarget) {
  Plugin& pl = Plugin::get();
  void* ctx = nullptr;
  ASSERT_EQ(pl.t5->init(&ctx, 0x99, 64, 64, testLogger, nullptr, nullptr), ncclSuccess);
  float table[kTunerNumAlgos][kTunerNumProtos];
  for (auto& row : table)
    for (float& e : row) e = 1.0e6f;  // usable, NCCL's own cost
  table[4][0] = kAlgoProtoIgnore;     // NVLS unusable: must stay ignored
  int channels = 0;
  ASSERT_EQ(pl.t5->getCollInfo(ctx, ncclFuncAllReduce, 64 << 20, 1,
                               reinterpret_cast<float**>(table), kTunerNumAlgos,
                               kTunerNumProtos, 0, &channels),
            ncclSuccess);
  EXPECT_EQ(table[4][0], kAlgoProtoIgnore);
  EXPECT_GT(table[1][2], 0.0f);      // Ring/Simple costed by the target model
  EXPECT_LT(table[1][2], 1.0e6f);
  EXPECT_GT(channels, 0);
  EXPECT_TRUE(logged("NCCL sees 64 ranks on 64 nodes -> target 64 ranks, 8 nodes x 8"));
  EXPECT_EQ(pl.t5->finalize(ctx), ncclSuccess);
  // v3 and v4 shims reach the same implementation.
  void* c4 = nullptr;
  ASSERT_EQ(pl.t4->init(8, 8, testLogger, &c4), ncclSuccess);
  float t2[kTunerNumAlgos][kTunerNumProtos] = {};
  ASSERT_EQ(pl.t3->getCollInfo(c4, ncclFuncAllGather, 1 << 20, 1, reinterpret_cast<float**>(t2),
                               kTunerNumAlgos, kTunerNumProtos, &channels),
            ncclSuccess);
  EXPECT_GT(t2[1][2], 0.0f);
  EXPECT_EQ(t2[0][2], kAlgoProtoIgnore);  // no tree all-gather on the target
  EXPECT_EQ(pl.t4->destroy(c4), ncclSuccess);
}

}  // namespace
}  // namespace crystal::test
