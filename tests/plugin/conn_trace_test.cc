// The per-request trace (plugin/conn_trace.h): exact CSV rows, the capacity bound, and the
// built plugin writing one row per completed request at process exit (CRYSTAL_TRACE_CONN).
#include "conn_trace.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "abi_harness.h"

namespace crystal::test {
namespace {

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string f; std::getline(ss, f, ',');) out.push_back(f);
  return out;
}

std::string tempPrefix(const char* name) {
  return ::testing::TempDir() + name + std::to_string(::getpid());
}

TEST(ConnTrace, WritesOneRowPerRecordWithItsConnection) {
  const std::string path = tempPrefix("trace_rows") + ".csv";
  plugin::ConnTrace t(path, 4);
  plugin::TraceConnInfo ring;
  ring.dir = 'r';
  ring.timing = 'r';
  ring.self_rank = 0;
  ring.peer_rank = 63;
  ring.nranks = 64;
  ring.graph = 1;
  ring.distance = 1;
  ring.ordinal = 3;
  ring.dev = 2;
  plugin::TraceConnInfo real;
  real.dir = 's';
  real.peer_kind = 'R';
  EXPECT_EQ(t.addConn(ring), 0u);
  EXPECT_EQ(t.addConn(real), 1u);
  t.record({0, 7, 524288, 1000, 15000, 15200, 14000, 3, 41, (std::uint64_t{5} << 24) | 9, 'n', true});
  t.record({1, 2, 64, 2000, INT64_MAX, 2500, 2100, 1});
  EXPECT_EQ(t.write(), 2u);
  const auto l = lines(path);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0],
            "conn,dir,peer_kind,timing,self,peer,nranks,graph,distance,ordinal,step,bytes,"
            "posted_ns,due_ns,done_ns,dev,first_test_ns,tests,conn_step,mirror_op,mirror_index,data");
  // Mirror key of operation 5, index 9; zeros before its send was posted, after a hold ran out.
  EXPECT_EQ(l[1], "0,r,v,r,0,63,64,1,1,3,7,524288,1000,15000,15200,2,14000,3,41,5,9,nh");
  // due -1: not modelled; conn_step -1: not tracked; no mirror key; nothing written
  EXPECT_EQ(l[2], "1,s,R,p,-1,-1,0,-1,0,0,2,64,2000,-1,2500,-1,2100,1,-1,-1,-1,-");
  std::remove(path.c_str());
}

TEST(ConnTrace, KeepsAtMostItsCapacity) {
  const std::string path = tempPrefix("trace_cap") + ".csv";
  plugin::ConnTrace t(path, 2);
  (void)t.addConn({});
  for (int i = 0; i < 5; ++i) t.record({0, static_cast<std::uint32_t>(i), 8, i, i + 1, i + 2});
  EXPECT_EQ(t.write(), 2u);
  const auto l = lines(path);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(fields(l[2])[10], "1");  // the first two records, in order
  std::remove(path.c_str());
}

// Waits for a child that recorded a trace; its file's path (the child must exit 0).
std::string traceOfChild(const std::string& prefix, pid_t child) {
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  return prefix + "." + std::to_string(child) + ".csv";
}

// Forks a child that sets CRYSTAL_TRACE_CONN=prefix (and CRYSTAL_TRACE_CONN_EVERY_S where
// `every` is given), initialises the built plugin for comm id `comm` and exits with what
// `body(net, ctx)` returns: exit() runs the trace's atexit writer, so a body that must leave
// as if killed calls _exit itself. The parent gets the child's pid.
template <typename Body>
pid_t traceChild(const std::string& prefix, std::uint64_t comm, const char* every, Body body) {
  const pid_t child = ::fork();
  if (child != 0) return child;
  ::setenv("CRYSTAL_TRACE_CONN", prefix.c_str(), 1);
  if (every != nullptr) ::setenv("CRYSTAL_TRACE_CONN_EVERY_S", every, 1);
  const ncclNet_v11_t* n = Plugin::get().v11;
  void* ctx = nullptr;
  if (!n || n->init(&ctx, comm, nullptr, testLogger, nullptr) != ncclSuccess) ::_exit(2);
  std::exit(body(n, ctx));
}

// The built plugin, in a child process (the trace is written at exit): a receive from and a
// send to a virtual peer give one row each, with the post, modelled due and observed done
// times of the request, due - posted = the model's step time.
TEST(ConnTrace, PluginWritesCompletedRequestsAtExit) {
  const std::string prefix = tempPrefix("trace_plugin");
  const pid_t child = traceChild(prefix, 0x7a, nullptr, [](const ncclNet_v11_t* n, void* ctx) {
    char lh[128] = {};
    void* lc = nullptr;
    if (n->listen(ctx, 0, lh, &lc) != ncclSuccess) return 3;
    live::NetHandle h;
    if (!live::decodeHandle(lh, h)) return 4;
    const int sock = openHello(h, live::PeerKind::Virtual);
    void* rc = pollUntil([&](void** out) { return n->accept(lc, out, nullptr); });
    live::NetHandle vh = virtualPeerHandle(1, 2);
    char vbuf[128] = {};
    std::memcpy(vbuf, &vh, sizeof vh);
    void* sc = pollUntil([&](void** out) { return n->connect(ctx, 0, vbuf, out, nullptr); });
    if (!rc || !sc) return 5;
    std::vector<char> buf(1 << 20);
    void *rmr = nullptr, *smr = nullptr;
    if (n->regMr(rc, buf.data(), buf.size(), NCCL_PTR_HOST, &rmr) != ncclSuccess ||
        n->regMr(sc, buf.data(), buf.size(), NCCL_PTR_HOST, &smr) != ncclSuccess)
      return 6;
    void* data[1] = {buf.data()};
    std::size_t sizes[1] = {256 << 10};
    int tags[1] = {0};
    void* mrs[1] = {rmr};
    void *rreq = nullptr, *sreq = nullptr;
    if (n->irecv(rc, 1, data, sizes, tags, mrs, nullptr, &rreq) != ncclSuccess) return 7;
    (void)waitDone(n, rreq);
    if (n->isend(sc, buf.data(), 64 << 10, 0, smr, nullptr, &sreq) != ncclSuccess) return 8;
    (void)waitDone(n, sreq);
    // Closed as NCCL does, so that the leak checker of the sanitizer build has nothing to say.
    if (n->deregMr(rc, rmr) != ncclSuccess || n->deregMr(sc, smr) != ncclSuccess ||
        n->closeRecv(rc) != ncclSuccess || n->closeSend(sc) != ncclSuccess ||
        n->closeListen(lc) != ncclSuccess || n->finalize(ctx) != ncclSuccess)
      return 9;
    ::close(sock);
    return 0;  // exit(), not _exit(): the trace is written by an atexit handler
  });
  ASSERT_GE(child, 0);
  const std::string path = traceOfChild(prefix, child);
  const auto l = lines(path);
  ASSERT_EQ(l.size(), 3u) << path;
  const auto r = fields(l[1]);
  const auto s = fields(l[2]);
  ASSERT_EQ(r.size(), 22u);
  ASSERT_EQ(s.size(), 22u);
  // Data policy mirror (the default): the receive came before any send to pair it with
  // (key 0 of the connection-wide count: no profiler announced an operation); held for the
  // mirror wait, it got zeros ("n", "h": the hold ran out).
  EXPECT_EQ(r[19], "0");
  EXPECT_EQ(r[20], "0");
  EXPECT_EQ(r[21], "nh");
  EXPECT_EQ(s[21], "-");  // sends write nothing
  EXPECT_EQ(r[15], "0");  // listened and connected on device 0
  EXPECT_EQ(r[1], "r");
  EXPECT_EQ(r[2], "v");
  EXPECT_EQ(r[11], std::to_string(256 << 10));
  EXPECT_EQ(s[1], "s");
  EXPECT_EQ(s[11], std::to_string(64 << 10));
  for (const auto& row : {r, s}) {
    const long long posted = std::stoll(row[12]), due = std::stoll(row[13]),
                    done = std::stoll(row[14]), first_test = std::stoll(row[16]);
    EXPECT_GE(done, due);
    EXPECT_GT(due, posted);
    // waitDone polls test() from right after the post until done.
    EXPECT_GE(first_test, posted);
    EXPECT_LE(first_test, done);
    EXPECT_GE(std::stoll(row[17]), 1);
  }
  // A lone receive of a peer-ready connection arrives one step (occupancy + latency) after
  // its post.
  EXPECT_EQ(std::stoll(r[13]) - std::stoll(r[12]), modelNs(256 << 10));
  std::remove(path.c_str());
}

// A process whose plugin never made a NET connection (under p2p_peers a real rank can reach
// every ring neighbour over P2P) still writes its trace: the header and no rows.
TEST(ConnTrace, PluginWithoutConnectionsWritesAnEmptyTrace) {
  const std::string prefix = tempPrefix("trace_empty");
  const pid_t child = traceChild(prefix, 0x7c, nullptr, [](const ncclNet_v11_t* n, void* ctx) {
    return n->finalize(ctx) != ncclSuccess ? 3 : 0;
  });
  ASSERT_GE(child, 0);
  const std::string path = traceOfChild(prefix, child);
  const auto l = lines(path);
  ASSERT_EQ(l.size(), 1u) << path;
  EXPECT_EQ(l[0].rfind("conn,dir,peer_kind,timing,", 0), 0u) << l[0];
  std::remove(path.c_str());
}

// CRYSTAL_TRACE_CONN_EVERY_S: a process that never exits normally (killed while hung) still
// leaves the rows recorded up to the last rewrite.
TEST(ConnTrace, PeriodicRewriteSurvivesAnAbnormalExit) {
  const std::string prefix = tempPrefix("trace_every");
  const pid_t child = traceChild(prefix, 0x7b, "1", [&](const ncclNet_v11_t* n, void* ctx) -> int {
    live::NetHandle vh = virtualPeerHandle(1, 2);
    char vbuf[128] = {};
    std::memcpy(vbuf, &vh, sizeof vh);
    void* sc = pollUntil([&](void** out) { return n->connect(ctx, 0, vbuf, out, nullptr); });
    if (!sc) ::_exit(3);
    std::vector<char> buf(4096);
    void* smr = nullptr;
    if (n->regMr(sc, buf.data(), buf.size(), NCCL_PTR_HOST, &smr) != ncclSuccess) ::_exit(4);
    void* sreq = nullptr;
    if (n->isend(sc, buf.data(), 1024, 0, smr, nullptr, &sreq) != ncclSuccess) ::_exit(5);
    (void)waitDone(n, sreq);
    // Waits (generously: CI machines are loaded) for a rewrite that holds the send, then
    // exits without atexit handlers, as if killed.
    const std::string path = prefix + "." + std::to_string(::getpid()) + ".csv";
    for (int i = 0; i < 300 && lines(path).size() < 2; ++i) ::usleep(100'000);
    ::_exit(0);
  });
  ASSERT_GE(child, 0);
  const std::string path = traceOfChild(prefix, child);
  const auto l = lines(path);
  ASSERT_EQ(l.size(), 2u) << path;
  EXPECT_EQ(fields(l[1])[11], "1024");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace crystal::test
