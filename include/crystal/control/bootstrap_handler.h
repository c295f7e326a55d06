// The production ControlHandler: turns the real ranks' requests into calls on the bootstrap
// stand-in (crystal/host/bootstrap_host.h). It knows which ranks are real (the config's
// emulation.real_ranks for the world communicator, plus every rank that registered) and
// answers the host's split questions through a SplitPlanner.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "crystal/config/config.h"
#include "crystal/control/server.h"
#include "crystal/control/split_rules.h"
#include "crystal/host/bootstrap_host.h"

namespace crystal::control {

class BootstrapHandler final : public ControlHandler {
 public:
  // Installs itself as `host`'s split resolver; `host` must outlive it.
  BootstrapHandler(host::BootstrapHost& host, const Config& config,
                   std::vector<SplitRule> split_rules, std::uint64_t emulation_id);

  [[nodiscard]] std::uint64_t emulationId() const override { return emulation_id_; }
  [[nodiscard]] UniqueId mintUniqueId(const PeerInfo& peer) override;
  void commInit(const PeerInfo& peer, const CommInit& req) override;
  void commSplit(const PeerInfo& peer, const CommSplit& req) override;
  PoolPlace blockPool(const PeerInfo& peer, const BlockPool& req) override;
  [[nodiscard]] Writes getWrites(const PeerInfo& peer, const GetWrites& req) override;
  void note(const PeerInfo& peer, const Note& n) override;
  void peerGone(const PeerInfo& peer) override;
  // The real processes' notes so far, "pid P: text", in arrival order (at most kMaxNotes,
  // then one line saying how many more came).
  [[nodiscard]] std::vector<std::string> notes() const;
  static constexpr std::size_t kMaxNotes = 64;

 private:
  host::BootstrapHost& host_;
  const Config& config_;
  std::uint64_t emulation_id_;
  mutable std::mutex mu_;  // server thread (requests) vs host loop thread (split resolver)
  std::map<std::uint64_t, std::set<int>> real_ranks_;  // comm hash -> registered real ranks
  SplitPlanner planner_;
  std::vector<std::string> notes_;  // mu_
  std::size_t notes_dropped_ = 0;   // mu_
};

}  // namespace crystal::control
