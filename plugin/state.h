// Process-wide plugin state: the target (config + model), the NICs reported to NCCL, the
// port queues of the timing model, and the per-communicator contexts (v11 init).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "crystal/config/config.h"
#include "crystal/live/link_timing.h"
#include "crystal/live/target_model.h"
#include "virtual_data.h"

namespace crystal::plugin {

struct NicInfo {
  std::string name;  // crystal0, crystal1, ...
  int speed_mbps = 0;
  float latency_us = 0;
  std::uint64_t guid = 0;
  std::shared_ptr<live::PortQueue> out = std::make_shared<live::PortQueue>();
  std::shared_ptr<live::PortQueue> in = std::make_shared<live::PortQueue>();
};

// Pairs the k-th virtual send with the k-th virtual receive connection of a communicator
// (ring symmetry, see crystal/live/link_timing.h).
struct NetContext {
  std::uint64_t comm_id = 0;
  std::mutex mu;
  std::vector<std::shared_ptr<live::StepLog>> send_logs;
  std::vector<std::weak_ptr<live::VirtualLink>> recv_links;
  void addVirtualSend(const std::shared_ptr<live::VirtualLink>& link);
  void addVirtualRecv(const std::shared_ptr<live::VirtualLink>& link);
  // Data policy mirror (virtual_data.h): the k-th virtual send comm and the k-th virtual
  // receive comm of this context share one MirrorChannel (creation order).
  [[nodiscard]] std::shared_ptr<MirrorChannel> nextMirror(bool for_send);

 private:
  std::vector<std::shared_ptr<MirrorChannel>> mirrors_;
  std::size_t mirror_sends_ = 0, mirror_recvs_ = 0;
};

// The target config: CRYSTAL_CONFIG through crystal::loadConfig, else built-in defaults.
// Throws InputError (bad file, or a loader that is not part of this build).
[[nodiscard]] Config loadTargetConfig();

class PluginState {
 public:
  static PluginState& get();

  // Loads config and model once (thread-safe). Throws InputError on a bad config/env.
  void ensureInit();
  // For tests that build a target in code: replaces config and model.
  void configure(const Config& cfg);

  [[nodiscard]] const Config& config() const { return cfg_; }
  [[nodiscard]] const live::TargetModel& model() const { return *model_; }
  [[nodiscard]] int ndev() const { return static_cast<int>(nics_.size()); }
  [[nodiscard]] NicInfo& nic(int dev);  // throws BadArgument for a bad index
  [[nodiscard]] live::LinkParams link() const { return link_; }
  [[nodiscard]] int maxRecvs() const { return max_recvs_; }
  [[nodiscard]] std::size_t maxBytes() const { return max_bytes_; }
  [[nodiscard]] bool tunerEnabled() const { return tuner_; }
  [[nodiscard]] bool sharedClock() const { return shared_clock_; }
  [[nodiscard]] std::uint64_t emulationId() const { return emulation_id_; }
  [[nodiscard]] const std::string& socketAddr() const { return socket_addr_; }
  [[nodiscard]] bool rdmaPresent() const { return rdma_; }
  // emulation.data, overridden by CRYSTAL_DATA.
  [[nodiscard]] DataPolicy dataPolicy() const { return data_; }

  // Contexts: one per v11 init (commId); v8..v10 share the default one.
  [[nodiscard]] NetContext* newContext(std::uint64_t comm_id);
  void dropContext(NetContext* ctx);
  [[nodiscard]] NetContext* checkContext(void* ctx);  // throws BadUsage if unknown
  [[nodiscard]] NetContext* defaultContext() { return &default_ctx_; }

 private:
  PluginState() = default;
  void applyLocked(const Config& cfg);

  std::mutex mu_;
  bool ready_ = false;
  Config cfg_;
  std::unique_ptr<live::TargetModel> model_;
  std::vector<NicInfo> nics_;
  live::LinkParams link_;
  int max_recvs_ = 8;
  std::size_t max_bytes_ = std::size_t{1} << 40;
  bool tuner_ = true;
  bool shared_clock_ = true;
  bool rdma_ = false;
  DataPolicy data_ = DataPolicy::Mirror;
  std::uint64_t emulation_id_ = 0;
  std::string socket_addr_;
  NetContext default_ctx_;
  std::list<NetContext> contexts_;
};

}  // namespace crystal::plugin
