#include "crystal/control/bootstrap_handler.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "crystal/control/comm_hash.h"
#include "crystal/control/graph_file.h"

namespace crystal::control {

namespace {
host::UniqueId toHostId(const control::UniqueId& id) {
  host::UniqueId out;
  std::memcpy(out.bytes.data(), id.data(), id.size());
  return out;
}
}  // namespace

BootstrapHandler::BootstrapHandler(host::BootstrapHost& host, const Config& config,
                                   std::vector<SplitRule> split_rules, std::uint64_t emulation_id)
    : host_(host), config_(config), emulation_id_(emulation_id), planner_(std::move(split_rules)) {
  host_.setSplitResolver([this](std::uint64_t parent, int index, int parent_rank) {
    std::lock_guard lock(mu_);
    const auto c = planner_.choose(parent, index, parent_rank);
    return host::SplitChoice{c.color, c.key};
  });
}

UniqueId BootstrapHandler::mintUniqueId(const PeerInfo&) {
  const host::UniqueId id = host_.mintUniqueId();
  UniqueId out{};
  std::memcpy(out.data(), id.bytes.data(), out.size());
  return out;
}

void BootstrapHandler::commInit(const PeerInfo& peer, const CommInit& req) {
  if (req.nranks < 1 || req.rank < 0 || req.rank >= req.nranks)
    throw InputError("pid " + std::to_string(peer.pid) + ": rank " + std::to_string(req.rank) +
                     " of a " + std::to_string(req.nranks) + "-rank communicator");
  const host::UniqueId id = toHostId(req.id);
  const std::uint64_t hash = host::commHashOf(id);
  if (hash != req.comm_hash)
    throw ProtocolError("interposer and host disagree on NCCL's commHash (0x" +
                        fmt::format("{:x} vs 0x{:x}", req.comm_hash, hash) + ")");
  // Ranks past the target job's are peers no graph or layout of this emulation knows; the
  // world's ranks other than the configured real ones are virtual, so no process may hold
  // one (the host would play that rank and wait for the configured one forever).
  const int world = config_.job.world_size;
  const auto& real = config_.emulation.real_ranks;
  if (world > 0 && req.nranks > world)
    throw InputError(fmt::format(
        "pid {}: rank {} of a {}-rank communicator, but the target job has {} ranks "
        "(job.world_size): ranks {}..{} are peers this emulation does not know; create it "
        "with at most {} ranks or raise job.world_size",
        peer.pid, req.rank, req.nranks, world, world, req.nranks - 1, world));
  if (req.nranks == world && !real.empty() &&
      std::find(real.begin(), real.end(), req.rank) == real.end())
    throw InputError(fmt::format(
        "pid {}: rank {} of the {}-rank world communicator is virtual in this emulation "
        "(emulation.real_ranks: [{}]): a real process cannot take its place; start it as one "
        "of those ranks or add {} to emulation.real_ranks",
        peer.pid, req.rank, req.nranks, fmt::join(real, ", "), req.rank));
  host::CommSpec spec;
  spec.nranks = req.nranks;
  spec.nccl_version = peer.nccl_version;
  {
    std::lock_guard lock(mu_);
    auto& reals = real_ranks_[hash];
    reals.insert(req.rank);
    // The world communicator: every configured real rank is real, registered yet or not
    // (the root must not hand a real rank's ring slot to a virtual one).
    if (req.nranks == config_.job.world_size) {
      spec.name = "world";
      for (int r : config_.emulation.real_ranks)
        if (r >= 0 && r < req.nranks) reals.insert(r);
    }
    spec.real_ranks.assign(reals.begin(), reals.end());
    planner_.markRootComm(hash);
  }
  host_.declareComm(id, spec);
  // The file the interposer pointed NCCL_GRAPH_FILE at (graph_file.h); split children inherit.
  if (config_.emulation.p2p_peers)
    host_.setGraphFile(hash, req.rank, graphFile(graphDir(emulation_id_), peer.pid));
  CRYSTAL_INFO("host: comm 0x{:x} ({} ranks) rank {} is real (pid {}, NCCL_HOSTID '{}')", hash,
               req.nranks, req.rank, peer.pid, peer.hostid);
}

void BootstrapHandler::commSplit(const PeerInfo& peer, const CommSplit& req) {
  if (req.parent_rank < 0 && req.parent_nranks > 0)
    throw InputError("pid " + std::to_string(peer.pid) + ": split of comm 0x" +
                     fmt::format("{:x}", req.parent_hash) + " without the rank it holds");
  if (req.color >= 0 && commHashOfSplit(req.parent_hash, static_cast<int>(req.split_seq),
                                        req.color) != req.child_hash)
    throw ProtocolError("COMM_SPLIT: child hash does not follow NCCL's rule");
  std::lock_guard lock(mu_);
  planner_.recordReal(req.parent_hash, static_cast<int>(req.split_seq),
                      RealSplitChoice{req.parent_rank, req.color, req.key});
  CRYSTAL_INFO("host: split #{} of comm 0x{:x}: real rank {} color {} key {} (pid {})",
               req.split_seq, req.parent_hash, req.parent_rank, req.color, req.key, peer.pid);
}

PoolPlace BootstrapHandler::blockPool(const PeerInfo& peer, const BlockPool& req) {
  const host::NodePlace at = host_.addBlockPool(
      req.comm_hash, req.rank, {req.recv_block_bytes, req.send_block_bytes, req.recv, req.send});
  CRYSTAL_INFO(
      "host: comm 0x{:x} rank {} (pid {}) offers {} recv and {} send blocks for P2P "
      "peers: {}",
      req.comm_hash, req.rank, peer.pid, req.recv.size(), req.send.size(),
      at.members > 0 ? fmt::format("one of {} GPUs of its host, ring {} -> it -> {}",
                                   at.members, at.prev, at.next)
                     : std::string("not used (no GPU of its node is virtual)"));
  return {at.members, at.prev, at.next, at.tree_channels};
}

Writes BootstrapHandler::getWrites(const PeerInfo&, const GetWrites& req) {
  Writes out;
  for (const auto& w : host_.takeDeviceWrites(req.comm_hash, req.rank, kMaxWrites))
    out.writes.push_back({w.address, w.value, w.watch, w.peer, w.nranks, w.ordinal,
                          (w.send ? 1u : 0u) | (static_cast<std::uint32_t>(w.graph) << 8)});
  return out;
}

void BootstrapHandler::note(const PeerInfo& peer, const Note& n) {
  CRYSTAL_WARN("host: pid {} says: {}", peer.pid, n.text);
  std::lock_guard lock(mu_);
  if (notes_.size() < kMaxNotes)
    notes_.push_back(fmt::format("pid {}: {}", peer.pid, n.text));
  else
    ++notes_dropped_;
}

std::vector<std::string> BootstrapHandler::notes() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out = notes_;
  if (notes_dropped_ > 0)
    out.push_back(fmt::format("{} more notes not kept", notes_dropped_));
  return out;
}

void BootstrapHandler::peerGone(const PeerInfo& peer) {
  CRYSTAL_INFO("host: real process pid {} disconnected", peer.pid);
}

}  // namespace crystal::control
