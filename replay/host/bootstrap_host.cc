// BootstrapHost: the three listeners (root, ring, p2p), the loop thread, and the routing of
// each accepted connection to its communicator by handshake magic.
#include "crystal/host/bootstrap_host.h"

#include <arpa/inet.h>
#include <fmt/core.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "comm.h"
#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "crystal/base/thread_name.h"
#include "loop.h"
#include "net.h"
#include "wire.h"

namespace crystal::host {

struct BootstrapHost::Impl {
  HostOptions options;
  Loop loop;
  Fd root_listener, ring_listener, p2p_listener;
  std::uint16_t root_port = 0, ring_port = 0, p2p_port = 0;
  HostContext ctx;
  SplitResolver resolver;
  std::function<void(const HostError&)> error_cb;
  std::function<void(const VirtualConnection&)> vconn_cb;

  mutable std::mutex mu;
  std::thread thread;
  std::atomic<bool> running{false};
  std::mt19937_64 rng{std::random_device{}()};

  std::map<std::uint64_t, std::unique_ptr<Comm>> comms;  // by hash
  std::map<std::uint64_t, Comm*> by_magic;               // ring / p2p handshake magic
  std::map<std::uint64_t, Comm*> by_root_magic;          // root handshake magic
  std::map<std::uint64_t, UniqueId> minted;              // root magic -> id
  std::map<std::uint64_t, std::vector<wire::ExtInfo>> early_check_ins;  // before declareComm
  std::vector<HostError> errors;

  explicit Impl(HostOptions opts) : options(std::move(opts)) {
    raiseFileLimit();
    root_listener = listenTcp(options.bind_address, options.root_port);
    ring_listener = listenTcp(options.bind_address, options.ring_port);
    p2p_listener = listenTcp(options.bind_address, options.p2p_port);
    root_port = localPort(root_listener.get());
    ring_port = localPort(ring_listener.get());
    p2p_port = localPort(p2p_listener.get());
    ctx.loop = &loop;
    ctx.options = &options;
    ctx.ring_port = ring_port;
    ctx.p2p_port = p2p_port;
    ctx.resolver = &resolver;
    ctx.report = [this](const HostError& e) {
      errors.push_back(e);
      if (error_cb) error_cb(e);
    };
    ctx.on_virtual_connection = [this](const VirtualConnection& v) {
      if (vconn_cb) vconn_cb(v);
    };
    ctx.create_child = [this](std::uint64_t hash, int nranks, std::vector<int> real,
                              std::string name) -> Comm* {
      auto& slot = comms[hash];
      if (!slot)
        slot = std::make_unique<Comm>(ctx, hash, hash, 0, nranks, std::move(real), std::move(name));
      by_magic[hash] = slot.get();
      return slot.get();
    };
    loop.addListener(root_listener.get(), [this](Fd fd) { acceptRoot(std::move(fd)); });
    loop.addListener(ring_listener.get(), [this](Fd fd) { acceptRing(std::move(fd)); });
    loop.addListener(p2p_listener.get(), [this](Fd fd) { acceptP2p(std::move(fd)); });
  }

  void report(std::uint64_t hash, const std::string& msg) {
    HostError e{hash, -1, msg};
    CRYSTAL_ERROR("{}", msg);
    ctx.report(e);
  }

  // Reads the 12-byte handshake; returns false until complete. Wrong type => close.
  static bool readHandshake(Stream& s, wire::Handshake& out) {
    if (s.rx().size() < wire::kHandshakeBytes) return false;
    out = wire::decodeHandshake(s.rx());
    s.consume(wire::kHandshakeBytes);
    return true;
  }

  void acceptRoot(Fd fd) {
    const StreamId id = loop.adopt(std::move(fd), false, "in:root");
    Stream* s = loop.find(id);
    s->setWaiting(true);
    auto magic = std::make_shared<std::uint64_t>(0);
    auto got_hs = std::make_shared<bool>(false);
    s->on_data = [this, magic, got_hs](Stream& st) {
      try {
        if (!*got_hs) {
          wire::Handshake hs;
          if (!readHandshake(st, hs)) return;
          if (minted.count(hs.magic) == 0 || hs.type != wire::kSocketTypeBootstrap) {
            loop.close(st.id());  // not one of ours: NCCL's root drops it silently too
            return;
          }
          *magic = hs.magic;
          *got_hs = true;
        }
        const auto frame = wire::tryParseFrame(st.rx(), wire::kMaxMessageBytes, "root check-in");
        if (!frame) return;
        const auto info = wire::decodeExact<wire::ExtInfo>(*frame, "extInfo check-in");
        loop.close(st.id());
        auto it = by_root_magic.find(*magic);
        if (it == by_root_magic.end())
          early_check_ins[*magic].push_back(info);
        else
          it->second->onCheckIn(info);
      } catch (const ProtocolError& e) {
        loop.close(st.id());
        auto it = by_root_magic.find(*magic);
        if (it != by_root_magic.end())
          it->second->fail(-1, fmt::format("root check-in: {}", e.what()));
        else
          report(0, fmt::format("root check-in: {}", e.what()));
      }
    };
  }

  void acceptRing(Fd fd) {
    const StreamId id = loop.adopt(std::move(fd), false, "in:ring");
    Stream* s = loop.find(id);
    s->setWaiting(true);
    s->on_data = [this](Stream& st) {
      wire::Handshake hs;
      if (!readHandshake(st, hs)) return;
      auto it = by_magic.find(hs.magic);
      if (it == by_magic.end() || hs.type != wire::kSocketTypeBootstrap) {
        loop.close(st.id());
        return;
      }
      st.setWaiting(false);
      st.on_data = nullptr;
      int target = -1;
      try {
        target = aliasRank(localAddress(st.fd()));
      } catch (const ProtocolError&) {
      }
      it->second->onRingAccept(st.id(), target);
    };
  }

  void acceptP2p(Fd fd) {
    const StreamId id = loop.adopt(std::move(fd), false, "in:p2p");
    Stream* s = loop.find(id);
    s->setWaiting(true);
    auto comm = std::make_shared<Comm*>(nullptr);
    auto target = std::make_shared<int>(-1);
    s->on_data = [this, comm, target](Stream& st) {
      try {
        if (*comm == nullptr) {
          wire::Handshake hs;
          if (!readHandshake(st, hs)) return;
          auto it = by_magic.find(hs.magic);
          if (it == by_magic.end() || hs.type != wire::kSocketTypeBootstrap) {
            loop.close(st.id());
            return;
          }
          *comm = it->second;
          *target = aliasRank(localAddress(st.fd()));
        }
        // The intra-node all-gather keeps its connection open for a socket ring of 2.5 MB
        // frames (bootstrap.cc bootstrapIntraNodeAllGather): the comm takes the stream.
        const auto ack_frame = wire::tryParseFrame(st.rx(), wire::kMaxMessageBytes, "socketAckInfo");
        if (!ack_frame) return;
        const auto first = wire::decodeExact<wire::SocketAck>(*ack_frame, "socketAckInfo");
        if (first.tag == wire::kTagIntraNodeAllGather) {
          st.consume(4 + ack_frame->size());
          st.setWaiting(false);
          Comm* c = *comm;  // resetting on_data destroys this lambda and its captures
          const int to = *target;
          st.on_data = nullptr;
          c->onIntraNodeAccept(st.id(), first.rank, to);
          return;
        }
        const auto msg = wire::tryParseBootstrapMessage(st.rx());
        if (!msg) return;
        const std::vector<std::byte> payload(msg->payload.begin(), msg->payload.end());
        const wire::SocketAck ack = msg->ack;
        loop.close(st.id());  // the sender closes after one message; nothing else comes
        (*comm)->onP2pMessage(*target, ack, payload);
      } catch (const ProtocolError& e) {
        loop.close(st.id());
        if (*comm != nullptr)
          (*comm)->fail(-1, fmt::format("bootstrap message: {}", e.what()));
        else
          report(0, fmt::format("bootstrap message: {}", e.what()));
      }
    };
  }

  void checkStalls() {
    const auto now = Clock::now();
    for (auto& [hash, c] : comms) c->checkStall(now);
    std::vector<StreamId> stale;
    loop.forEachStream([&](Stream& s) {
      if (s.label().rfind("in:", 0) == 0 && s.waiting() && now - s.since() > options.stall_timeout)
        stale.push_back(s.id());
    });
    for (StreamId id : stale) {
      CRYSTAL_WARN("closing an incoming bootstrap connection silent for {} ms",
                   options.stall_timeout.count());
      loop.close(id);
    }
  }

  void run() {
    auto last_check = Clock::now();
    while (running.load()) {
      loop.wait(50);
      std::lock_guard lock(mu);
      try {
        loop.dispatch();
      } catch (const std::exception& e) {
        report(0, fmt::format("host loop: {}", e.what()));
      }
      if (Clock::now() - last_check > std::chrono::milliseconds(100)) {
        checkStalls();
        last_check = Clock::now();
      }
    }
  }
};

BootstrapHost::BootstrapHost(HostOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

BootstrapHost::~BootstrapHost() { stop(); }

void BootstrapHost::start() {
  if (impl_->running.exchange(true)) return;
  impl_->thread = std::thread([this] {
    nameThisThread("crystal host");
    impl_->run();
  });
}

void BootstrapHost::stop() {
  if (!impl_->running.exchange(false)) return;
  impl_->loop.wake();
  if (impl_->thread.joinable()) impl_->thread.join();
}

UniqueId BootstrapHost::mintUniqueId() {
  std::lock_guard lock(impl_->mu);
  in_addr ip{};
  if (inet_pton(AF_INET, impl_->options.root_address.c_str(), &ip) != 1)
    throw InputError(
        fmt::format("host root address '{}' is not an IPv4 address", impl_->options.root_address));
  wire::BootstrapHandle h;
  do {
    h.magic = impl_->rng();
  } while (h.magic == 0 || impl_->minted.count(h.magic) != 0);
  h.addr = wire::SocketAddress::fromIpv4(ntohl(ip.s_addr), impl_->root_port);
  UniqueId id;
  std::memcpy(id.bytes.data(), &h, sizeof h);
  impl_->minted[h.magic] = id;
  return id;
}

std::uint64_t BootstrapHost::declareComm(const UniqueId& id, const CommSpec& spec) {
  if (spec.nccl_version != kSupportedNcclVersion)
    throw ProtocolError(fmt::format(
        "comm '{}': the real rank loaded NCCL version code {}; the emulation host speaks only "
        "NCCL 2.28.9 ({})",
        spec.name, spec.nccl_version, kSupportedNcclVersion));
  if (spec.nranks < 1 || spec.nranks > kMaxAliasRank)
    throw InputError(
        fmt::format("comm '{}': nranks {} outside [1, {}]", spec.name, spec.nranks, kMaxAliasRank));
  wire::BootstrapHandle h;
  std::memcpy(&h, id.bytes.data(), sizeof h);
  std::lock_guard lock(impl_->mu);
  if (impl_->minted.count(h.magic) == 0)
    throw InputError(fmt::format("comm '{}': unique id (magic {:#x}) was not minted by this host",
                                 spec.name, h.magic));
  const std::uint64_t hash = commHashOf(id);
  if (auto it = impl_->comms.find(hash); it != impl_->comms.end()) {
    if (it->second->nranks() != spec.nranks)
      throw InputError(fmt::format("comm '{}' declared again with {} ranks instead of {}",
                                   spec.name, spec.nranks, it->second->nranks()));
    it->second->addRealRanks(spec.real_ranks);
    return hash;
  }
  auto comm =
      std::make_unique<Comm>(impl_->ctx, hash, h.magic, h.magic, spec.nranks, spec.real_ranks,
                             spec.name.empty() ? fmt::format("{:#x}", hash) : spec.name);
  auto& slot = impl_->comms[hash];
  slot = std::move(comm);
  impl_->by_magic[h.magic] = slot.get();
  impl_->by_root_magic[h.magic] = slot.get();
  auto early = impl_->early_check_ins.find(h.magic);
  if (early != impl_->early_check_ins.end()) {
    auto infos = std::move(early->second);
    impl_->early_check_ins.erase(early);
    for (const auto& info : infos) slot->onCheckIn(info);
  }
  return hash;
}

void BootstrapHost::setSplitResolver(SplitResolver resolver) {
  std::lock_guard lock(impl_->mu);
  impl_->resolver = std::move(resolver);
}

NodePlace BootstrapHost::addBlockPool(std::uint64_t comm_hash, int rank,
                                      const BlockPoolSpec& pool) {
  if (!impl_->options.p2p_peers)
    throw InputError("a block pool for P2P peers, but emulation.p2p_peers is off");
  if (pool.recv_block_bytes < kP2pRecvBlockBytes || pool.send_block_bytes < kP2pSendBlockBytes)
    throw InputError(fmt::format(
        "block pool of rank {}: blocks of {} / {} bytes; NCCL 2.28.9 needs {} / {}", rank,
        pool.recv_block_bytes, pool.send_block_bytes, kP2pRecvBlockBytes, kP2pSendBlockBytes));
  std::lock_guard lock(impl_->mu);
  auto it = impl_->comms.find(comm_hash);
  if (it == impl_->comms.end())
    throw InputError(fmt::format("block pool for comm {:#x}, which the host does not know",
                                 comm_hash));
  if (!it->second->isReal(rank))
    throw InputError(
        fmt::format("block pool of comm {:#x} rank {}, which is not real", comm_hash, rank));
  return it->second->addBlockPool(rank, pool);
}

void BootstrapHost::setGraphFile(std::uint64_t comm_hash, int rank, const std::string& path) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->comms.find(comm_hash);
  if (it != impl_->comms.end() && it->second->isReal(rank)) it->second->setGraphFile(rank, path);
}

std::vector<DeviceWrite> BootstrapHost::takeDeviceWrites(std::uint64_t comm_hash, int rank,
                                                         std::size_t max) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->comms.find(comm_hash);
  if (it == impl_->comms.end()) return {};
  return it->second->takeDeviceWrites(rank, max);
}

void BootstrapHost::onError(std::function<void(const HostError&)> callback) {
  std::lock_guard lock(impl_->mu);
  impl_->error_cb = std::move(callback);
}

void BootstrapHost::onVirtualConnection(std::function<void(const VirtualConnection&)> callback) {
  std::lock_guard lock(impl_->mu);
  impl_->vconn_cb = std::move(callback);
}

std::vector<HostError> BootstrapHost::errors() const {
  std::lock_guard lock(impl_->mu);
  return impl_->errors;
}

std::vector<CommStatus> BootstrapHost::comms() const {
  std::lock_guard lock(impl_->mu);
  std::vector<CommStatus> out;
  for (const auto& [hash, c] : impl_->comms) out.push_back(c->status());
  return out;
}

std::uint16_t BootstrapHost::rootPort() const noexcept { return impl_->root_port; }
std::uint16_t BootstrapHost::ringPort() const noexcept { return impl_->ring_port; }
std::uint16_t BootstrapHost::p2pPort() const noexcept { return impl_->p2p_port; }

}  // namespace crystal::host
