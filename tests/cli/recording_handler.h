// A ControlHandler for tests: mints ids with a recognisable pattern and records every
// request; can be told to refuse.
#pragma once

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "crystal/base/error.h"
#include "crystal/control/server.h"

namespace crystal::control::testing {

class RecordingHandler : public ControlHandler {
 public:
  std::uint64_t emulationId() const override { return 77; }
  UniqueId mintUniqueId(const PeerInfo& peer) override {
    std::lock_guard lock(mu);
    UniqueId id{};
    for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::uint8_t>(minted + i);
    ++minted;
    pids.push_back(peer.pid);
    return id;
  }
  void commInit(const PeerInfo&, const CommInit& req) override {
    std::lock_guard lock(mu);
    if (!refuse.empty()) throw InputError(refuse);
    inits.push_back(req);
    if (event_log != nullptr) event_log->push_back("host:COMM_INIT");
  }
  void commSplit(const PeerInfo&, const CommSplit& req) override {
    std::lock_guard lock(mu);
    splits.push_back(req);
    if (event_log != nullptr) event_log->push_back("host:COMM_SPLIT");
  }
  PoolPlace blockPool(const PeerInfo&, const BlockPool& req) override {
    std::lock_guard lock(mu);
    pools.push_back(req);
    if (event_log != nullptr) event_log->push_back("host:BLOCK_POOL");
    return {8, req.rank - 1, req.rank + 1};
  }
  Writes getWrites(const PeerInfo&, const GetWrites& req) override {
    std::lock_guard lock(mu);
    Writes w;
    if (req.rank >= 0) w.writes.push_back({req.comm_hash, static_cast<std::uint64_t>(req.rank)});
    return w;
  }
  void note(const PeerInfo&, const Note& n) override {
    std::lock_guard lock(mu);
    notes.push_back(n.text);
  }
  void peerGone(const PeerInfo& peer) override {
    std::lock_guard lock(mu);
    gone.push_back(peer.pid);
  }

  std::mutex mu;
  int minted = 0;
  std::vector<std::uint32_t> pids, gone;
  std::vector<CommInit> inits;
  std::vector<CommSplit> splits;
  std::vector<BlockPool> pools;
  std::vector<std::string> notes;
  std::string refuse;  // non-empty: commInit throws InputError with this text
  std::vector<std::string>* event_log = nullptr;
};

}  // namespace crystal::control::testing
