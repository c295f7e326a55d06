// Host side of the control channel: accepts the interposers of real ranks, checks their NCCL
// version, and turns their requests into calls on a ControlHandler (the bootstrap stand-in's
// adapter in production, a fake in tests). One thread, poll() over all connections: a real
// rank sends a handful of requests in its lifetime, so no thread per connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "crystal/base/error.h"
#include "crystal/control/protocol.h"

namespace crystal::control {

// Who sent a request (from its HELLO).
struct PeerInfo {
  std::uint32_t pid = 0;
  int nccl_version = 0;
  std::string hostid;
  std::string address;  // peer's TCP address, for messages
};

// What the host does with requests. Implementations throw (InputError, ProtocolError, any
// std::exception) to refuse: the text goes back to the real rank, which fails its NCCL call.
// Calls come from the server's one thread, one at a time.
class ControlHandler {
 public:
  virtual ~ControlHandler() = default;
  [[nodiscard]] virtual std::uint64_t emulationId() const { return 0; }
  // The host is the bootstrap root: mint a fresh 128-byte ncclUniqueId that points at it.
  [[nodiscard]] virtual UniqueId mintUniqueId(const PeerInfo& peer) = 0;
  // A real rank is about to call ncclCommInitRank* with this id/size/rank.
  virtual void commInit(const PeerInfo& peer, const CommInit& req) = 0;
  // A real rank is about to call ncclCommSplit on a communicator it registered before.
  virtual void commSplit(const PeerInfo& peer, const CommSplit& req) = 0;
  // A real rank's process offers memory for P2P connections to the virtual GPUs of its node
  // (protocol.h BlockPool); the answer says where the rank stands on its node.
  [[nodiscard]] virtual PoolPlace blockPool(const PeerInfo& /*peer*/, const BlockPool& /*req*/) {
    throw ProtocolError("this host takes no BLOCK_POOL (no emulation.p2p_peers)");
  }
  // Stores to make in that process's GPU memory (protocol.h GetWrites); empty: none pending.
  [[nodiscard]] virtual Writes getWrites(const PeerInfo& /*peer*/, const GetWrites& /*req*/) {
    throw ProtocolError("this host takes no GET_WRITES (no emulation.p2p_peers)");
  }
  // The real process says its emulation stopped being faithful somewhere (protocol.h Note):
  // kept for the run's report. The default keeps nothing.
  virtual void note(const PeerInfo& /*peer*/, const Note& /*n*/) {}
  // The connection of a real process closed (it exited or crashed).
  virtual void peerGone(const PeerInfo& /*peer*/) {}
};

struct ControlServerOptions {
  std::string listen = "127.0.0.1:0";  // port 0: the kernel picks one; see address()
  std::vector<int> supported_nccl_versions = {kSupportedNcclVersion};
};

class ControlServer {
 public:
  // Binds and starts serving at once. Throws InputError if the address cannot be used.
  ControlServer(ControlHandler& handler, ControlServerOptions opts);
  ~ControlServer();  // stops the thread, closes every connection
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // "IP:PORT" to put in CRYSTAL_HOST.
  [[nodiscard]] std::string address() const;
  // Requests answered so far (all types, errors included); for tests and the report.
  [[nodiscard]] std::uint64_t requestsServed() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The refusal text for an NCCL version the host was not verified against.
[[nodiscard]] std::string unsupportedVersionText(int version, std::uint32_t pid,
                                                 const std::vector<int>& supported);

}  // namespace crystal::control
