// Record mode: a harness calls the ncclProfiler_v5 table the way NCCL 2.28 does (init per
// communicator, API and task events with parents, stop, finalize); the file it writes is
// read back into a recording and sliced. Bad record files name the file and line.
#include <dlfcn.h>
#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "plugin/profiler/proxy_ops.h"
#include "plugin/profiler/recorder.h"

namespace crystal::graph {
namespace {

using namespace crystal::nccl;
using ::testing::HasSubstr;

ncclProfilerEventDescr_v5_t collApi(void* parent, const char* func, std::size_t count,
                                    void* stream) {
  ncclProfilerEventDescr_v5_t d{};
  d.type = ncclProfileCollApi;
  d.parentObj = parent;
  d.collApi.func = func;
  d.collApi.count = count;
  d.collApi.datatype = "ncclBfloat16";
  d.collApi.root = 0;
  d.collApi.stream = stream;
  return d;
}

ncclProfilerEventDescr_v5_t p2pApi(void* parent, const char* func, std::size_t count,
                                   void* stream) {
  ncclProfilerEventDescr_v5_t d{};
  d.type = ncclProfileP2pApi;
  d.parentObj = parent;
  d.p2pApi.func = func;
  d.p2pApi.count = count;
  d.p2pApi.datatype = "ncclBfloat16";
  d.p2pApi.stream = stream;
  return d;
}

ncclProfilerEventDescr_v5_t p2pTask(void* parent, const char* func, std::size_t count, int peer) {
  ncclProfilerEventDescr_v5_t d{};
  d.type = ncclProfileP2p;
  d.parentObj = parent;
  d.p2p.func = func;
  d.p2p.count = count;
  d.p2p.datatype = "ncclBfloat16";
  d.p2p.peer = peer;
  d.p2p.nChannels = 1;
  return d;
}

std::vector<profiler::ProxyOpStart>& seenProxyOps() {
  static std::vector<profiler::ProxyOpStart> v;
  return v;
}

// Emulation without recording (before the harness test: the record file, once open, stays
// open for the process): the net plugin observes proxy operations, so the profiler keeps
// collectives' events only, as their proxy operations' parents. p2p tasks and API events get
// no handle: NCCL asks for one per task on the enqueuing thread, 2 x N for an all-to-all,
// and anything more is host time the real rank spends and a target rank does not.
TEST(Profiler, EmulationKeepsOnlyCollectivesForTheirProxyOps) {
  ::unsetenv("CRYSTAL_RECORD");
  seenProxyOps().clear();
  profiler::setProxyOpObserver(
      {[] { return true; }, [](const profiler::ProxyOpStart& s) { seenProxyOps().push_back(s); }});
  const ncclProfiler_v5_t& p = profiler::profilerV5();
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(p.init(&ctx, 0x77, &mask, "world", 8, 64, 0, nullptr), ncclSuccess);
  EXPECT_EQ(mask, static_cast<int>(ncclProfileColl | ncclProfileProxyOp));
  ASSERT_NE(ctx, nullptr);

  int stream = 0;
  void* h = &stream;
  auto send = p2pTask(nullptr, "Send", 1024, 3);
  ASSERT_EQ(p.startEvent(ctx, &h, &send), ncclSuccess);
  EXPECT_EQ(h, nullptr);
  h = &stream;
  auto api = collApi(nullptr, "AllGather", 4096, &stream);
  ASSERT_EQ(p.startEvent(ctx, &h, &api), ncclSuccess);
  EXPECT_EQ(h, nullptr);

  ncclProfilerEventDescr_v5_t coll{};
  coll.type = ncclProfileColl;
  coll.coll.func = "AllGather";
  coll.coll.algo = "RING";
  coll.coll.proto = "SIMPLE";
  coll.coll.nChannels = 16;
  void* task = nullptr;
  ASSERT_EQ(p.startEvent(ctx, &task, &coll), ncclSuccess);
  ASSERT_NE(task, nullptr);
  // NCCL stops a collective's event once enqueued, often before its proxy operations start.
  EXPECT_EQ(p.stopEvent(task), ncclSuccess);
  ncclProfilerEventDescr_v5_t op{};
  op.type = ncclProfileProxyOp;
  op.parentObj = task;
  op.proxyOp.channelId = 5;
  op.proxyOp.peer = 9;
  op.proxyOp.isSend = 1;
  op.proxyOp.nSteps = 12;
  h = &stream;
  ASSERT_EQ(p.startEvent(ctx, &h, &op), ncclSuccess);
  EXPECT_EQ(h, nullptr);
  op.parentObj = nullptr;  // a p2p task's: no collective
  op.proxyOp.isSend = 0;
  ASSERT_EQ(p.startEvent(ctx, &h, &op), ncclSuccess);

  ASSERT_EQ(seenProxyOps().size(), 2u);
  const profiler::ProxyOpStart& a = seenProxyOps()[0];
  EXPECT_EQ(a.comm, 0x77u);
  EXPECT_EQ(a.channel, 5);
  EXPECT_EQ(a.peer, 9);
  EXPECT_TRUE(a.send);
  EXPECT_EQ(a.transfers, 12);
  EXPECT_GT(a.op, 0u);
  EXPECT_TRUE(a.ring);
  EXPECT_TRUE(a.allgather);
  EXPECT_FALSE(a.rewritable);
  EXPECT_EQ(a.channels, 16);
  const profiler::ProxyOpStart& b = seenProxyOps()[1];
  EXPECT_EQ(b.op, 0u);
  EXPECT_FALSE(b.send);
  EXPECT_FALSE(b.ring);
  EXPECT_EQ(b.channels, 0);
  EXPECT_EQ(a.chain_root, -1) << "an all-gather is no chain";

  // A reduce to rank 3: its proxy operations carry the root, the buffer's bytes and NCCL's
  // chunk (the net plugin times the chain from its head, OpSegments::Place::chain_hops).
  coll.coll.func = "Reduce";
  coll.coll.root = 3;
  coll.coll.count = 1000;
  coll.coll.datatype = "ncclBfloat16";
  ASSERT_EQ(p.startEvent(ctx, &task, &coll), ncclSuccess);
  EXPECT_EQ(p.stopEvent(task), ncclSuccess);
  op.parentObj = task;
  op.proxyOp.chunkSize = 131072;
  ASSERT_EQ(p.startEvent(ctx, &h, &op), ncclSuccess);
  coll.coll.func = "Broadcast";
  coll.coll.datatype = "Unknown";  // NCCL's name for a type it does not know: size unknown
  ASSERT_EQ(p.startEvent(ctx, &task, &coll), ncclSuccess);
  EXPECT_EQ(p.stopEvent(task), ncclSuccess);
  op.parentObj = task;
  ASSERT_EQ(p.startEvent(ctx, &h, &op), ncclSuccess);
  ASSERT_EQ(seenProxyOps().size(), 4u);
  const profiler::ProxyOpStart& r = seenProxyOps()[2];
  EXPECT_EQ(r.chain_root, 3);
  EXPECT_TRUE(r.chain_reduce);
  EXPECT_EQ(r.coll_bytes, 2000u);
  EXPECT_EQ(r.chunk_bytes, 131072);
  EXPECT_GT(r.issued_ns, 0) << "when the enqueuing thread reported the collective";
  EXPECT_GT(seenProxyOps()[0].issued_ns, 0) << "every collective's, for its proxy operations";
  const profiler::ProxyOpStart& bc = seenProxyOps()[3];
  EXPECT_EQ(bc.chain_root, 3);
  EXPECT_FALSE(bc.chain_reduce);
  EXPECT_EQ(bc.coll_bytes, 0u);
  EXPECT_EQ(p.finalize(ctx), ncclSuccess);
  profiler::setProxyOpObserver({});
}

// A communicator none of whose connections asked for proxy operations (under p2p_peers a
// rank whose ring neighbours are GPUs of its node: NCCL's P2P transport has no proxy
// operations) gets no collective event either: NCCL asks for one per collective on the
// program's thread, and keeping it is an allocation and a lock there (the observer's
// coll_wanted; the net plugin answers PluginState::feedsProxyOps).
TEST(Profiler, EmulationSkipsCollectivesOfACommWithoutFedConnections) {
  ::unsetenv("CRYSTAL_RECORD");
  profiler::setProxyOpObserver({[] { return true; }, [](const profiler::ProxyOpStart&) {},
                                [](std::uint64_t comm) { return comm == 0x77; }});
  const ncclProfiler_v5_t& p = profiler::profilerV5();
  ncclProfilerEventDescr_v5_t coll{};
  coll.type = ncclProfileColl;
  coll.coll.func = "AllReduce";
  coll.coll.algo = "RING";
  coll.coll.nChannels = 16;
  for (const std::uint64_t comm : {std::uint64_t{0x77}, std::uint64_t{0x78}}) {
    void* ctx = nullptr;
    int mask = 0;
    ASSERT_EQ(p.init(&ctx, comm, &mask, "world", 8, 64, 0, nullptr), ncclSuccess);
    ASSERT_NE(ctx, nullptr);
    void* task = &mask;
    ASSERT_EQ(p.startEvent(ctx, &task, &coll), ncclSuccess);
    if (comm == 0x77) {
      EXPECT_NE(task, nullptr) << "a fed comm's collective: its proxy operations' parent";
      EXPECT_EQ(p.stopEvent(task), ncclSuccess);
    } else {
      EXPECT_EQ(task, nullptr) << "nothing to feed: no event";
    }
    EXPECT_EQ(p.finalize(ctx), ncclSuccess);
  }
  profiler::setProxyOpObserver({});
}

TEST(Profiler, HarnessDrivesTheAbiLikeNccl) {
  const ncclProfiler_v5_t& p = profiler::profilerV5();
  EXPECT_STREQ(p.name, "crystal");
  void* ctx = nullptr;
  int mask = -1;
  // Without CRYSTAL_RECORD the plugin records nothing and asks for no events.
  ::unsetenv("CRYSTAL_RECORD");
  ASSERT_EQ(p.init(&ctx, 1, &mask, "x", 1, 2, 0, nullptr), ncclSuccess);
  EXPECT_EQ(mask, 0);
  EXPECT_EQ(ctx, nullptr);

  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("crystal-rec-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "rank.%p.jsonl").string();
  ::setenv("CRYSTAL_RECORD", file.c_str(), 1);
  ::setenv("CRYSTAL_RANK", "5", 1);
  void *tp = nullptr, *pp = nullptr;
  ASSERT_EQ(p.init(&tp, 0xabc, &mask, "tp", 1, 2, 1, nullptr), ncclSuccess);
  EXPECT_NE(mask & ncclProfileCollApi, 0);
  EXPECT_NE(mask & ncclProfileP2p, 0);
  ASSERT_EQ(p.init(&pp, 0xdef, &mask, "pp", 1, 2, 1, nullptr), ncclSuccess);
  int s0 = 0, s1 = 0;  // two CUDA streams, by address

  // ncclAllReduce on the tp communicator, with the task NCCL makes of it.
  void *api = nullptr, *task = nullptr;
  auto d = collApi(nullptr, "AllReduce", 4096, &s0);
  ASSERT_EQ(p.startEvent(tp, &api, &d), ncclSuccess);
  ncclProfilerEventDescr_v5_t coll{};
  coll.type = ncclProfileColl;
  coll.parentObj = api;
  coll.coll.func = "AllReduce";
  coll.coll.count = 4096;
  coll.coll.datatype = "ncclBfloat16";
  coll.coll.algo = "RING";
  coll.coll.proto = "SIMPLE";
  ASSERT_EQ(p.startEvent(tp, &task, &coll), ncclSuccess);
  EXPECT_EQ(p.stopEvent(api), ncclSuccess);
  EXPECT_EQ(p.recordEventState(task, ncclProfilerKernelChStop, nullptr), ncclSuccess);
  EXPECT_EQ(p.stopEvent(task), ncclSuccess);

  // ncclGroupStart; ncclSend(peer 0); ncclRecv(peer 0); ncclGroupEnd on the pp communicator.
  void* group = nullptr;
  ncclProfilerEventDescr_v5_t g{};
  g.type = ncclProfileGroupApi;
  g.groupApi.groupDepth = 1;
  ASSERT_EQ(p.startEvent(pp, &group, &g), ncclSuccess);
  void *send = nullptr, *recv = nullptr, *send_task = nullptr, *recv_task = nullptr;
  auto ds = p2pApi(group, "Send", 1024, &s1), dr = p2pApi(group, "Recv", 1024, &s1);
  ASSERT_EQ(p.startEvent(pp, &send, &ds), ncclSuccess);
  ASSERT_EQ(p.startEvent(pp, &recv, &dr), ncclSuccess);
  // NCCL schedules the tasks in its own order: the recv task first.
  auto tr = p2pTask(group, "Recv", 1024, 0), ts = p2pTask(group, "Send", 1024, 0);
  ASSERT_EQ(p.startEvent(pp, &recv_task, &tr), ncclSuccess);
  ASSERT_EQ(p.startEvent(pp, &send_task, &ts), ncclSuccess);
  for (void* h : {send, recv, group, recv_task, send_task}) EXPECT_EQ(p.stopEvent(h), ncclSuccess);
  // Events NCCL may send that we do not ask for, and null handles, are harmless.
  void* none = &s0;
  ncclProfilerEventDescr_v5_t step{};
  step.type = ncclProfileProxyStep;
  EXPECT_EQ(p.startEvent(pp, &none, &step), ncclSuccess);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(p.stopEvent(nullptr), ncclSuccess);
  EXPECT_EQ(p.finalize(tp), ncclSuccess);
  EXPECT_EQ(p.finalize(pp), ncclSuccess);

  const std::string path = (dir / fmt::format("rank.{}.jsonl", ::getpid())).string();
  const RecordedRank r = readNcclRecording(path);
  EXPECT_EQ(r.rank, 5);
  ASSERT_EQ(r.comms.size(), 2u);
  EXPECT_EQ(r.comms[0].name, "tp");
  EXPECT_EQ(r.comms[1].rank, 1);
  ASSERT_EQ(r.ops.size(), 5u);
  EXPECT_EQ(r.ops[0].kind, OpKind::Collective);
  EXPECT_EQ(r.ops[0].coll, CollKind::AllReduce);
  EXPECT_EQ(r.ops[0].bytes, 8192u);
  EXPECT_EQ(r.ops[0].stream, 0);
  EXPECT_EQ(r.ops[1].kind, OpKind::GroupBegin);
  EXPECT_EQ(r.ops[2].kind, OpKind::Send);
  EXPECT_EQ(r.ops[2].peer, 0);
  EXPECT_EQ(r.ops[2].stream, 1);
  EXPECT_EQ(r.ops[3].kind, OpKind::Recv);
  EXPECT_EQ(r.ops[4].kind, OpKind::GroupEnd);
  EXPECT_FALSE(r.notes.empty());
  std::filesystem::remove_all(dir);
}

// CRYSTAL_RECORD_EVENTS=api (what `crystal emulate` sets for its report): NCCL is asked for
// the program's calls only; task and group events get no handle and are not written.
TEST(Profiler, ApiLevelWritesTheProgramsCallsOnly) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("crystal-rec-api-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "api.jsonl").string();
  ::setenv("CRYSTAL_RECORD", file.c_str(), 1);
  ::setenv("CRYSTAL_RECORD_EVENTS", "api", 1);
  const ncclProfiler_v5_t& p = profiler::profilerV5();
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(p.init(&ctx, 0x5151, &mask, "api", 8, 64, 0, nullptr), ncclSuccess);
  ::unsetenv("CRYSTAL_RECORD_EVENTS");
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(mask, static_cast<int>(ncclProfileCollApi | ncclProfileP2pApi));
  int stream = 0;
  void* group = &stream;
  ncclProfilerEventDescr_v5_t g{};
  g.type = ncclProfileGroupApi;
  ASSERT_EQ(p.startEvent(ctx, &group, &g), ncclSuccess);
  EXPECT_EQ(group, nullptr);
  void* send = nullptr;
  auto ds = p2pApi(nullptr, "Send", 1024, &stream);
  ASSERT_EQ(p.startEvent(ctx, &send, &ds), ncclSuccess);
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(p.stopEvent(send), ncclSuccess);
  void* task = &stream;
  auto ts = p2pTask(nullptr, "Send", 1024, 3);
  ASSERT_EQ(p.startEvent(ctx, &task, &ts), ncclSuccess);
  EXPECT_EQ(task, nullptr);
  EXPECT_EQ(p.finalize(ctx), ncclSuccess);  // writes what is queued
  // The record file is the process's first: under ctest, this one (one process a test).
  std::ifstream in(file);
  if (in) {
    std::string line;
    int api_lines = 0, other = 0;
    while (std::getline(in, line)) {
      if (line.find("\"comm\":\"0000000000005151\"") == std::string::npos ||
          line.find("\"ev\"") == std::string::npos)
        continue;
      if (line.find("\"ev\":\"p2p_api\"") != std::string::npos)
        ++api_lines;
      else
        ++other;
    }
    EXPECT_EQ(api_lines, 1);
    EXPECT_EQ(other, 0);
  }
  std::filesystem::remove_all(dir);
}

std::string errorOf(const std::string& text) {
  try {
    (void)parseNcclRecording(text, "rec.jsonl");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

constexpr const char* kHeader = "{\"crystal_record\":1,\"rank\":\"3\",\"pid\":1}\n";
constexpr const char* kComm =
    "{\"comm\":\"00ab\",\"name\":\"\",\"nnodes\":1,\"nranks\":2,\"rank\":1,\"t\":0}\n";

TEST(Profiler, BadRecordFilesNameFileAndLine) {
  EXPECT_THAT(errorOf(""), HasSubstr("rec.jsonl: empty recording"));
  EXPECT_THAT(errorOf("{\"x\":1}\n"), HasSubstr("rec.jsonl:1: not a crystal record file"));
  EXPECT_THAT(errorOf("{\"crystal_record\":1,\"rank\":null}\n"),
              HasSubstr("rec.jsonl:1: the recording does not say its global rank"));
  EXPECT_THAT(errorOf(std::string(kHeader) + "{oops\n"), HasSubstr("rec.jsonl:2: not JSON"));
  EXPECT_THAT(errorOf(std::string(kHeader) + "{\"t\":1e999}\n"),
              HasSubstr("rec.jsonl:2: not JSON"));
  EXPECT_THAT(
      errorOf(
          std::string(kHeader) +
          "{\"ev\":\"coll_api\",\"comm\":\"00ab\",\"id\":0,\"parent\":-1,\"func\":\"AllReduce\","
          "\"count\":1,\"dtype\":\"ncclFloat32\",\"root\":0,\"stream\":\"0x1\"}\n"),
      HasSubstr("rec.jsonl:2: communicator 00ab was never initialised"));
  const std::string base = std::string(kHeader) + kComm;
  EXPECT_THAT(
      errorOf(
          base +
          "{\"ev\":\"coll_api\",\"comm\":\"00ab\",\"id\":0,\"parent\":-1,\"func\":\"AllReduce\","
          "\"count\":1,\"dtype\":\"ncclComplex\",\"root\":0,\"stream\":\"0x1\"}\n"),
      HasSubstr("rec.jsonl:3: datatype 'ncclComplex' unknown"));
  EXPECT_THAT(
      errorOf(base +
              "{\"ev\":\"p2p_api\",\"comm\":\"00ab\",\"id\":0,\"parent\":-1,\"func\":\"Send\","
              "\"count\":1,\"dtype\":\"ncclFloat32\",\"stream\":\"0x1\"}\n"),
      HasSubstr("rec.jsonl:3: Send of 1 elements has no p2p task event"));
  EXPECT_THAT(
      errorOf(base +
              "{\"ev\":\"coll_api\",\"comm\":\"00ab\",\"id\":0,\"parent\":-1,\"func\":\"Gather\","
              "\"count\":1,\"dtype\":\"ncclFloat32\",\"root\":0,\"stream\":\"0x1\"}\n"),
      HasSubstr("rec.jsonl:3: collective 'Gather'"));
  EXPECT_THAT(
      errorOf(
          base +
          "{\"ev\":\"coll_api\",\"comm\":\"00ab\",\"id\":0,\"parent\":-1,\"func\":\"AllReduce\","
          "\"count\":1,\"dtype\":\"ncclFloat32\",\"stream\":\"0x1\"}\n"),
      HasSubstr("rec.jsonl:3: 'root' missing"));
}

TEST(Profiler, SizeOnlyCommunicatorsNeedANameToSlice) {
  // dense-8gpu (tp2 dp2 pp2): rank 5's size-2 communicator with it at index 1 could be tp or
  // pp; without a name the slice refuses to guess.
  const Config cfg = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  const std::string text =
      std::string("{\"crystal_record\":1,\"rank\":5}\n") + kComm +
      "{\"ev\":\"coll_api\",\"comm\":\"00ab\",\"id\":0,\"parent\":-1,\"func\":\"AllReduce\","
      "\"count\":1,\"dtype\":\"ncclFloat32\",\"root\":0,\"stream\":\"0x1\"}\n";
  std::vector<RecordedRank> recs{parseNcclRecording(text, "r5.jsonl")};
  recs.push_back(recs[0]);
  recs[1].rank = 1;
  try {
    (void)sliceRecordings(cfg, recs);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("r5.jsonl: rank 5: communicator '00ab' (size 2, rank 1 in it) "
                                    "fits layout families tp, pp alike"));
  }
}

#ifdef CRYSTAL_PLUGIN_SO
TEST(Profiler, PluginLibraryExportsTheTable) {
  // Built by the same build, but not a link dependency (the test binary must not wait on it).
  if (!std::filesystem::exists(CRYSTAL_PLUGIN_SO))
    GTEST_SKIP() << CRYSTAL_PLUGIN_SO << " not built";
  void* lib = ::dlopen(CRYSTAL_PLUGIN_SO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  const auto* table = static_cast<const ncclProfiler_v5_t*>(::dlsym(lib, "ncclProfiler_v5"));
  ASSERT_NE(table, nullptr);
  EXPECT_STREQ(table->name, "crystal");
  EXPECT_NE(table->init, nullptr);
  EXPECT_NE(table->finalize, nullptr);
  ::dlclose(lib);
}
#endif

}  // namespace
}  // namespace crystal::graph
