#include "net_api.h"

#include <fmt/core.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "call_stats.h"
#include "conn_trace.h"
#include "connection.h"
#include "crystal/base/log.h"
#include "errors.h"
#include "handle_table.h"
#include "nccl_log.h"
#include "params.h"
#include "real_comm.h"
#include "state.h"
#include "virtual_comm.h"

namespace crystal::plugin::net {
namespace {

using nccl::ncclSuccess;

// Per-request trace (CRYSTAL_TRACE_CONN): name the connection once, at creation.
void traceConn(DataComm& c, TraceConnInfo info) {
  ConnTrace* t = ConnTrace::global();
  if (!t) return;
  info.dev = c.dev();
  c.trace_id = t->addConn(info);
}

void traceVirtual(DataComm& c, const VirtualConn& id, const live::VirtualLink& link) {
  traceConn(c, {.dir = id.send ? 's' : 'r',
                .peer_kind = 'v',
                .timing = link.isRing()      ? 'r'
                          : link.treeTimed() ? 't'
                                             : 'p',
                .self_rank = id.self_rank,
                .peer_rank = id.peer_rank,
                .nranks = id.nranks,
                .graph = id.graph,
                .distance = id.distance,
                .ordinal = id.ordinal});
}

void traceReal(DataComm& c, char dir) { traceConn(c, {.dir = dir, .peer_kind = 'R'}); }

// Which target link a real<->real connection is timed with: one INFO line a connection.
void logRealLink(const std::string& peer, int self_rank, int peer_rank,
                 const NetContext::RealLink& l) {
  const double gbps = l.link.ns_per_byte > 0 ? 1.0 / l.link.ns_per_byte : 0.0;
  if (l.nvlink)
    CRYSTAL_INFO(
        "{}: ranks {} and {} share a target node: timed as its NVLink ({:.1f} GB/s + "
        "{} ns)",
        peer, self_rank, peer_rank, gbps, l.link.latency_ns);
  else if (self_rank < 0 || peer_rank < 0)
    CRYSTAL_INFO(
        "{}: ranks not known on both sides: timed as the target's NET link ({:.1f} "
        "GB/s + {} ns)",
        peer, gbps, l.link.latency_ns);
  else
    CRYSTAL_INFO(
        "{}: ranks {} and {} on different target nodes: timed as the NET link "
        "({:.1f} GB/s + {} ns)",
        peer, self_rank, peer_rank, gbps, l.link.latency_ns);
}

template <typename T>
T* need(T* p, const char* what) {
  if (!p) throw PluginError(Errc::BadArgument, fmt::format("{} is null", what));
  return p;
}

Comm& commOf(const void* token, CommKind kind, const char* entry) {
  Comm* c = HandleTable::instance().find(token);
  if (!c)
    throw PluginError(Errc::BadUsage,
                      fmt::format("{}: comm {} is closed or was never opened", entry, token));
  if (c->kind() != kind)
    throw PluginError(Errc::BadUsage, fmt::format("{}: comm {} has the wrong kind", entry, token));
  return *c;
}

DataComm& dataCommOf(const void* token, const char* entry) {
  Comm* c = HandleTable::instance().find(token);
  if (!c || (c->kind() != CommKind::Send && c->kind() != CommKind::Recv))
    throw PluginError(Errc::BadUsage,
                      fmt::format("{}: comm {} is closed or not a send/recv comm", entry, token));
  return static_cast<DataComm&>(*c);
}

int sendCapacity() { return nccl::NCCL_NET_MAX_REQUESTS * PluginState::get().maxRecvs(); }

// How long a request may wait on a real peer before its comm logs a stall warning: the
// emulation's timeout, CRYSTAL_TIMEOUT (what the host calls use) over emulation.timeout_s.
live::TimeNs stallNs(const PluginState& st) {
  double s = st.config().emulation.timeout_s;
  if (const char* env = std::getenv("CRYSTAL_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end != env && *end == '\0' && v > 0) s = v;
  }
  return static_cast<live::TimeNs>((s > 0 && s < 1e6 ? s : 1e6) * 1e9);  // no overflow
}

void closeComm(void* token, CommKind kind, const char* entry) {
  (void)commOf(token, kind, entry);
  std::unique_ptr<Comm> c = HandleTable::instance().remove(token);
  if (c) std::lock_guard wait_out(c->mu);  // let a call already inside finish first
  // NCCL closes connections from its proxy's service thread, after the progress thread made
  // the data calls: the log covers every thread.
  if (kind != CommKind::Listen) logThreadCallStats();
}

}  // namespace

ncclResult_t init(void** ctx, std::uint64_t commId, nccl::ncclNetCommConfig_v11_t*,
                  nccl::ncclDebugLogger_t logger, nccl::ncclProfilerCallback_t) noexcept {
  installNcclLogger(logger);
  return guard("init", [&] {
    PluginState& st = PluginState::get();
    st.ensureInit();
    // The trace exists from here, not from the first NET connection: a run whose real rank
    // makes none (every ring neighbour over P2P under p2p_peers) still leaves a file, with
    // no rows, instead of none at all.
    if (const ConnTrace* t = ConnTrace::global())
      CRYSTAL_INFO("per-request trace (CRYSTAL_TRACE_CONN): {} at exit", t->path());
    NetContext* c = ctx ? st.newContext(commId) : st.defaultContext();
    if (ctx) *ctx = c;
    CRYSTAL_INFO("net plugin crystal ready for comm {:#x}: {} devices", commId, st.ndev());
  });
}

ncclResult_t devices(int* ndev) noexcept {
  return guard("devices", [&] {
    PluginState::get().ensureInit();
    *need(ndev, "ndev") = PluginState::get().ndev();
  });
}

ncclResult_t getProperties(int dev, nccl::ncclNetProperties_v11_t* props) noexcept {
  return guard("getProperties", [&] {
    PluginState& st = PluginState::get();
    st.ensureInit();
    NicInfo& n = st.nic(dev);
    need(props, "props");
    *props = nccl::ncclNetProperties_v11_t{};
    props->name = n.name.data();
    props->pciPath = nullptr;
    props->guid = n.guid;
    // GDR (docs/plugin.md "GPU memory (GDR)"): with CUDA NCCL keeps the NET buffers in GPU
    // memory (given NCCL_NET_GDR_LEVEL, which crystal emulate sets), so a connection to a
    // virtual peer costs the GPU only HBM traffic; the plugin writes those buffers through
    // the CUDA driver and stages real peers' bytes through pinned host memory.
    props->ptrSupport =
        st.gdr() ? (nccl::NCCL_PTR_HOST | nccl::NCCL_PTR_CUDA) : nccl::NCCL_PTR_HOST;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = n.speed_mbps;
    props->port = 1;
    props->latency = n.latency_us;
    props->maxComms = static_cast<int>(HandleTable::kCapacity);
    props->maxRecvs = st.maxRecvs();
    props->netDeviceType = nccl::NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = 0;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = st.maxBytes();
    props->maxCollBytes = st.maxBytes();
    props->maxMultiRequestSize = 1;
  });
}

ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) noexcept {
  return guard("listen", [&] {
    PluginState& st = PluginState::get();
    st.ensureInit();
    NetContext* c = st.checkContext(ctx);
    (void)st.nic(dev);
    need(handle, "handle");
    live::NetHandle h;
    auto lc = makeListen(c, dev, h);
    std::memcpy(handle, &h, sizeof h);
    *need(listenComm, "listenComm") = HandleTable::instance().insert(std::move(lc));
  });
}

ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm,
                     nccl::ncclNetDeviceHandle_v11_t** sendDevComm) noexcept {
  return guard("connect", [&] {
    PluginState& st = PluginState::get();
    need(sendComm, "sendComm");
    *sendComm = nullptr;
    if (sendDevComm) *sendDevComm = nullptr;
    NetContext* c = st.checkContext(ctx);
    (void)st.nic(dev);  // validates the device
    live::NetHandle h = decodeOrThrow(handle);
    if (h.emulation != st.emulationId())
      throw PluginError(Errc::BadArgument,
                        fmt::format("handle of emulation {} (offset 16) in emulation {}",
                                    h.emulation, st.emulationId()));
    auto& table = HandleTable::instance();
    if (h.kind == live::HandleKind::VirtualPeer) {
      VirtualConn vc;
      vc.send = true;
      vc.comm_id = h.comm_id;
      vc.self_rank = h.self_rank;
      vc.peer_rank = h.rank;
      vc.nranks = h.nranks;
      vc.distance = h.distance;
      vc.ordinal = h.ordinal;
      vc.graph = h.graph;
      vc.tree_channels = h.tree_channels;
      auto link = c->virtualLink(vc, dev);
      auto sc = std::make_unique<VirtualSendComm>(c, dev, sendCapacity(), link, h.rank,
                                                  c->mirrorFor(vc), c->opSegmentsFor(vc));
      sc->setStallWarning(stallNs(st));
      traceVirtual(*sc, vc, *link);
      *sendComm = table.insert(std::move(sc));
      return;
    }
    // RealListen: non-blocking TCP connect + Hello, progressed over repeated calls.
    void* token = reinterpret_cast<void*>(static_cast<std::uintptr_t>(h.connect_token));
    if (h.connect_token == 0 || !table.find(token)) {
      SockAddr to;
      std::memcpy(to.ip, h.addr, 4);
      to.port_be = h.port;
      live::Hello hello;
      hello.peer = live::PeerKind::Real;
      hello.listen_id = h.listen_id;
      hello.comm_id = h.comm_id;
      const PluginState::CommRank self = st.commRank(c->comm_id);
      if (self.rank >= 0 && h.rank >= 0 && self.nranks == h.nranks) {
        hello.sender_rank = self.rank;
        hello.receiver_rank = h.rank;
        hello.nranks = h.nranks;
      }
      token = table.insert(std::make_unique<PendingConnect>(c, dev, connectTcp(to), hello));
      h.connect_token = reinterpret_cast<std::uintptr_t>(token);
      std::memcpy(static_cast<char*>(handle) + offsetof(live::NetHandle, connect_token),
                  &h.connect_token, sizeof h.connect_token);
    }
    auto& pc = static_cast<PendingConnect&>(commOf(token, CommKind::PendingConnect, "connect"));
    if (!pc.connected && !(pc.connected = connectDone(pc.fd.get()))) return;
    while (pc.hello_sent < sizeof pc.hello) {
      const std::size_t n =
          sendSome(pc.fd.get(), reinterpret_cast<char*>(&pc.hello) + pc.hello_sent,
                   sizeof pc.hello - pc.hello_sent);
      if (n == 0) return;
      pc.hello_sent += n;
    }
    Fd fd = std::move(pc.fd);
    const live::Hello hello = pc.hello;  // pc goes with its table entry
    // Both sides name the connection by (comm, listen id): the two logs pair up.
    std::string peer =
        fmt::format("a real peer (comm {:#x}, listen {})", hello.comm_id, hello.listen_id);
    (void)table.remove(token);
    const std::uint64_t zero = 0;
    std::memcpy(static_cast<char*>(handle) + offsetof(live::NetHandle, connect_token), &zero,
                sizeof zero);
    const NetContext::RealLink link =
        c->realLink(hello.sender_rank, hello.receiver_rank, hello.nranks, dev, true);
    logRealLink(peer, hello.sender_rank, hello.receiver_rank, link);
    auto rc = std::make_unique<RealSendComm>(c, dev, sendCapacity(), std::move(fd), link.link,
                                             link.port, std::move(peer), stallNs(st),
                                             paramBool("CRYSTAL_SHM"), paramBool("CRYSTAL_IPC"));
    traceReal(*rc, 's');
    *sendComm = table.insert(std::move(rc));
  });
}

ncclResult_t accept(void* listenComm, void** recvComm,
                    nccl::ncclNetDeviceHandle_v11_t** recvDevComm) noexcept {
  return guard("accept", [&] {
    PluginState& st = PluginState::get();
    need(recvComm, "recvComm");
    *recvComm = nullptr;
    if (recvDevComm) *recvDevComm = nullptr;
    auto& lc = static_cast<ListenComm&>(commOf(listenComm, CommKind::Listen, "accept"));
    std::lock_guard lock(lc.mu);
    if (!lc.pending.valid()) {
      lc.pending = acceptTcp(lc.fd.get());
      if (!lc.pending.valid()) return;
      lc.hello_got = 0;
    }
    while (lc.hello_got < sizeof lc.hello) {
      const std::size_t n =
          recvSome(lc.pending.get(), reinterpret_cast<char*>(&lc.hello) + lc.hello_got,
                   sizeof lc.hello - lc.hello_got);
      if (n == 0) return;
      lc.hello_got += n;
    }
    Fd fd = std::move(lc.pending);
    checkHello(lc, lc.hello);
    (void)st.nic(lc.dev());  // validates the device
    constexpr int kRecvCapacity = nccl::NCCL_NET_MAX_REQUESTS;
    if (lc.hello.peer == live::PeerKind::Virtual) {
      VirtualConn id;
      id.send = false;
      id.comm_id = lc.hello.comm_id;
      id.self_rank = lc.hello.receiver_rank;
      id.peer_rank = lc.hello.sender_rank;
      id.nranks = lc.hello.nranks;
      id.distance = lc.hello.distance;
      id.ordinal = lc.hello.ordinal;
      id.graph = lc.hello.graph;
      id.tree_channels = lc.hello.tree_channels;
      auto link = lc.ctx()->virtualLink(id, lc.dev());
      link->watchHost(fd.release());  // EOF on it: the host (and the virtual sender) is gone
      // The stream stays open with the host; the data path only watches it for EOF.
      auto vc = std::make_unique<VirtualRecvComm>(lc.ctx(), lc.dev(), kRecvCapacity, link,
                                                  lc.hello.sender_rank, lc.ctx()->mirrorFor(id),
                                                  lc.ctx()->opSegmentsFor(id));
      vc->setStallWarning(stallNs(PluginState::get()));
      if (id.graph == live::kGraphTree)
        vc->setTreeOf(lc.ctx()->comm_id != 0 ? lc.ctx()->comm_id : id.comm_id);
      traceVirtual(*vc, id, *link);
      *recvComm = HandleTable::instance().insert(std::move(vc));
      return;
    }
    // The sender's view of the two ranks, where it agrees with ours.
    const PluginState::CommRank self = st.commRank(lc.ctx()->comm_id);
    const bool known =
        self.rank >= 0 && lc.hello.receiver_rank == self.rank && lc.hello.nranks == self.nranks;
    const NetContext::RealLink link = lc.ctx()->realLink(
        known ? self.rank : -1, known ? lc.hello.sender_rank : -1, self.nranks, lc.dev(), false);
    std::string peer =
        fmt::format("a real peer (comm {:#x}, listen {})", lc.hello.comm_id, lc.hello.listen_id);
    logRealLink(peer, known ? self.rank : -1, known ? lc.hello.sender_rank : -1, link);
    auto rc =
        std::make_unique<RealRecvComm>(lc.ctx(), lc.dev(), kRecvCapacity, std::move(fd), link.link,
                                       st.sharedClock(), std::move(peer), stallNs(st));
    traceReal(*rc, 'r');
    *recvComm = HandleTable::instance().insert(std::move(rc));
  });
}

ncclResult_t regMr(void* comm, void* data, std::size_t size, int type, void** mhandle) noexcept {
  return guard("regMr", [&] {
    DataComm& c = dataCommOf(comm, "regMr");
    std::lock_guard lock(c.mu);
    *need(mhandle, "mhandle") = c.regMr(data, size, type);
  });
}

ncclResult_t regMrDmaBuf(void* comm, void* data, std::size_t size, int type, std::uint64_t, int,
                         void** mhandle) noexcept {
  // DMA-BUF is not advertised (ptrSupport): NCCL only calls this if a plugin reports
  // NCCL_PTR_DMABUF. Registering the range (host or GPU) is all the plugin needs.
  return regMr(comm, data, size, type, mhandle);
}

ncclResult_t deregMr(void* comm, void* mhandle) noexcept {
  return guard("deregMr", [&] {
    DataComm& c = dataCommOf(comm, "deregMr");
    std::lock_guard lock(c.mu);
    c.deregMr(mhandle);
  });
}

ncclResult_t isend(void* sendComm, void* data, std::size_t size, int tag, void* mhandle, void*,
                   void** request) noexcept {
  const live::TimeNs now = live::nowNs();
  return guard("isend", [&] {
    const DataCallTimer timer(now);
    need(request, "request");
    *request = nullptr;
    auto& c = static_cast<DataComm&>(commOf(sendComm, CommKind::Send, "isend"));
    if (size > PluginState::get().maxBytes())
      throw PluginError(Errc::BadArgument, fmt::format("isend of {} bytes exceeds maxP2pBytes {}",
                                                       size, PluginState::get().maxBytes()));
    std::lock_guard lock(c.mu);
    if (size > 0) c.checkRange(mhandle, data, size);
    Request* r = c.allocRequest();
    if (!r) return;  // NCCL retries
    try {
      c.isend(*r, data, size, tag, now);
    } catch (...) {
      c.freeRequest(*r);
      throw;
    }
    *request = HandleTable::requestToken(sendComm, c.slotOf(*r));
  });
}

ncclResult_t irecv(void* recvComm, int n, void** data, std::size_t* sizes, int* tags,
                   void** mhandles, void**, void** request) noexcept {
  const live::TimeNs now = live::nowNs();
  return guard("irecv", [&] {
    const DataCallTimer timer(now);
    need(request, "request");
    *request = nullptr;
    auto& c = static_cast<DataComm&>(commOf(recvComm, CommKind::Recv, "irecv"));
    if (n < 1 || n > PluginState::get().maxRecvs())
      throw PluginError(Errc::BadArgument, fmt::format("irecv of {} buffers (maxRecvs {})", n,
                                                       PluginState::get().maxRecvs()));
    need(data, "data");
    need(sizes, "sizes");
    std::lock_guard lock(c.mu);
    for (int i = 0; i < n; ++i)
      if (sizes[i] > 0) c.checkRange(need(mhandles, "mhandles")[i], data[i], sizes[i]);
    Request* r = c.allocRequest();
    if (!r) return;
    try {
      c.irecv(*r, n, data, sizes, tags, now);
    } catch (...) {
      c.freeRequest(*r);
      throw;
    }
    *request = HandleTable::requestToken(recvComm, c.slotOf(*r));
  });
}

ncclResult_t iflush(void* recvComm, int, void**, int*, void**, void** request) noexcept {
  return guard("iflush", [&] {
    (void)commOf(recvComm, CommKind::Recv, "iflush");
    // Nothing to flush: NCCL calls this after a Simple receive into GPU memory when
    // ncclTopoNeedFlush says so (pre-Hopper GPU, forceFlush, C2C). A flush makes a NIC's
    // PCIe writes visible to the GPU; here no NIC writes. A virtual sender's bytes come from
    // the plugin's own stream and a real peer's from its host-to-device copy, and test()
    // reports a receive done only after that stream work completed. NULL = nothing to wait.
    *need(request, "request") = nullptr;
  });
}

ncclResult_t test(void* request, int* done, int* sizes) noexcept {
  const live::TimeNs now = live::nowNs();
  try {
    const DataCallTimer timer(now);
    int slot = -1;
    const void* comm = HandleTable::commOfRequest(request, &slot);
    Comm* c = HandleTable::instance().find(comm);
    if (!c || slot < 0 || (c->kind() != CommKind::Send && c->kind() != CommKind::Recv))
      throw PluginError(Errc::BadUsage, fmt::format("test: request {} is unknown or its comm "
                                                    "was closed",
                                                    request));
    auto& dc = static_cast<DataComm&>(*c);
    std::lock_guard lock(dc.mu);
    Request* r = dc.slot(slot);
    if (!r)
      throw PluginError(Errc::BadUsage, fmt::format("test: request {} already completed", request));
    if (r->tests++ == 0) r->first_test = now;
    const bool finished = dc.test(*r, now, sizes);
    if (finished) {
      if (dc.trace_id != DataComm::kNoTrace)
        ConnTrace::global()->record({dc.trace_id, static_cast<std::uint32_t>(r->step), r->bytes,
                                     r->posted, r->due, now, r->first_test, r->tests,
                                     r->conn_step, r->mirrored ? r->mirror_k : UINT64_MAX,
                                     r->written, r->hold_ran_out});
      dc.freeRequest(*r);
    }
    *need(done, "done") = finished ? 1 : 0;
    return ncclSuccess;
  } catch (...) {
    return currentExceptionToNccl("test");
  }
}

ncclResult_t closeSend(void* sendComm) noexcept {
  return guard("closeSend", [&] { closeComm(sendComm, CommKind::Send, "closeSend"); });
}

ncclResult_t closeRecv(void* recvComm) noexcept {
  return guard("closeRecv", [&] { closeComm(recvComm, CommKind::Recv, "closeRecv"); });
}

ncclResult_t closeListen(void* listenComm) noexcept {
  return guard("closeListen", [&] { closeComm(listenComm, CommKind::Listen, "closeListen"); });
}

ncclResult_t getDeviceMr(void* comm, void* mhandle, void** dptr_mhandle) noexcept {
  return guard("getDeviceMr", [&] {
    (void)dataCommOf(comm, "getDeviceMr");
    (void)mhandle;
    *need(dptr_mhandle, "dptr_mhandle") = nullptr;  // host device type: nothing on the GPU
  });
}

ncclResult_t irecvConsumed(void* recvComm, int, void*) noexcept {
  // Buffers are never written after test() reported them, so there is nothing to release.
  return guard("irecvConsumed", [&] { (void)commOf(recvComm, CommKind::Recv, "irecvConsumed"); });
}

ncclResult_t finalize(void* ctx) noexcept {
  return guard("finalize", [&] {
    PluginState& st = PluginState::get();
    if (ctx && ctx != st.defaultContext()) st.dropContext(static_cast<NetContext*>(ctx));
  });
}

ncclResult_t setNetAttr(void* ctx, nccl::ncclNetAttr_v11_t* attr) noexcept {
  // Hints (flows, op, algo, proto) do not change the target's timing: accepted and ignored.
  return guard("setNetAttr", [&] {
    (void)PluginState::get().checkContext(ctx);
    (void)attr;
  });
}

}  // namespace crystal::plugin::net
