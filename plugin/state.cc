#include "state.h"

#include <algorithm>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "errors.h"
#include "params.h"
#include "rdma_probe.h"

namespace crystal::plugin {

void NetContext::addVirtualSend(const std::shared_ptr<live::VirtualLink>& link) {
  std::lock_guard lock(mu);
  const std::size_t k = send_logs.size();
  send_logs.push_back(link->log());
  if (k < recv_links.size())
    if (auto r = recv_links[k].lock()) r->pairWith(link->log());
}

void NetContext::addVirtualRecv(const std::shared_ptr<live::VirtualLink>& link) {
  std::lock_guard lock(mu);
  const std::size_t k = recv_links.size();
  recv_links.push_back(link);
  if (k < send_logs.size()) link->pairWith(send_logs[k]);
}

std::shared_ptr<MirrorChannel> NetContext::nextMirror(bool for_send) {
  std::lock_guard lock(mu);
  std::size_t& k = for_send ? mirror_sends_ : mirror_recvs_;
  if (k >= mirrors_.size()) mirrors_.push_back(std::make_shared<MirrorChannel>());
  return mirrors_[k++];
}

PluginState& PluginState::get() {
  static PluginState state;
  return state;
}

Config loadTargetConfig() {
  Config cfg;
  cfg.source = "<builtin>";
  const std::string path = paramString("CRYSTAL_CONFIG");
  if (!path.empty()) {
#ifdef CRYSTAL_HAVE_CONFIG_LOADER
    cfg = loadConfig(path);
#else
    throw InputError(fmt::format(
        "CRYSTAL_CONFIG={}: this build has no config loader (crystal_graph not built)", path));
#endif
  } else {
    CRYSTAL_INFO("no CRYSTAL_CONFIG: built-in target, {} NICs of {} GB/s, {} us",
                 cfg.cluster.fabric.nics_per_node, cfg.cluster.fabric.nic.bandwidth_GBps,
                 cfg.cluster.fabric.nic.latency_us);
  }
  return cfg;
}

void PluginState::ensureInit() {
  std::lock_guard lock(mu_);
  if (ready_) return;
  const Config cfg = loadTargetConfig();
  applyLocked(cfg);
  const RdmaProbe rdma = probeRdma();
  rdma_ = rdma.devices > 0;
  if (rdma_)
    CRYSTAL_INFO("RDMA device {} found ({} total); real peers still use TCP (RC path not built)",
                 rdma.first, rdma.devices);
  else
    CRYSTAL_INFO("no RDMA device ({}); real peers use TCP on {}",
                 rdma.library ? "libibverbs loaded, 0 devices" : "libibverbs absent",
                 socket_addr_);
  ready_ = true;
}

void PluginState::configure(const Config& cfg) {
  std::lock_guard lock(mu_);
  applyLocked(cfg);
  ready_ = true;
}

void PluginState::applyLocked(const Config& cfg) {
  const auto& fab = cfg.cluster.fabric;
  if (fab.nics_per_node <= 0 || fab.nic.bandwidth_GBps <= 0 || fab.nic.latency_us < 0)
    throw InputError(fmt::format("{}: cluster.fabric: nics_per_node and nic.bandwidth_GBps "
                                 "must be > 0, nic.latency_us >= 0",
                                 cfg.source));
  max_recvs_ = static_cast<int>(paramInt("CRYSTAL_MAX_RECVS"));
  if (max_recvs_ < 1 || max_recvs_ > 8)
    throw InputError(fmt::format("environment CRYSTAL_MAX_RECVS={}: must be 1..8", max_recvs_));
  tuner_ = paramBool("CRYSTAL_TUNER") && cfg.emulation.tuner;
  shared_clock_ = paramBool("CRYSTAL_SHARED_CLOCK");
  emulation_id_ = static_cast<std::uint64_t>(paramInt("CRYSTAL_EMULATION_ID"));
  socket_addr_ = paramString("CRYSTAL_SOCKET_ADDR");
  const std::string data = paramString("CRYSTAL_DATA");
  data_ = data.empty() ? cfg.emulation.data : parseDataPolicy(data, "environment CRYSTAL_DATA");
  cfg_ = cfg;
  model_ = live::makeTargetModel(cfg_);
  link_ = live::linkParams(*model_, cfg_.cluster);
  nics_.clear();
  for (int i = 0; i < fab.nics_per_node; ++i) {
    NicInfo n;
    n.name = fmt::format("crystal{}", i);
    n.speed_mbps = static_cast<int>(fab.nic.bandwidth_GBps * 8000.0 + 0.5);  // GB/s -> Mb/s
    n.latency_us = static_cast<float>(link_.latency_ns / 1e3);
    n.guid = 0x4352590000000000ull | static_cast<std::uint64_t>(i);
    nics_.push_back(std::move(n));
  }
  CRYSTAL_INFO("target model: {}; link {} ns + {:.4f} ns/B; maxRecvs {}; tuner {}; data {}",
               model_->name(), link_.latency_ns, link_.ns_per_byte, max_recvs_,
               tuner_ ? "on" : "off", dataPolicyName(data_));
}

NicInfo& PluginState::nic(int dev) {
  if (dev < 0 || dev >= ndev())
    throw PluginError(Errc::BadArgument, fmt::format("device {} out of range 0..{}", dev, ndev() - 1));
  return nics_[static_cast<std::size_t>(dev)];
}

NetContext* PluginState::newContext(std::uint64_t comm_id) {
  std::lock_guard lock(mu_);
  auto& c = contexts_.emplace_back();
  c.comm_id = comm_id;
  return &c;
}

void PluginState::dropContext(NetContext* ctx) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(contexts_.begin(), contexts_.end(), [&](auto& c) { return &c == ctx; });
  if (it == contexts_.end()) throw PluginError(Errc::BadUsage, "finalize: unknown context");
  contexts_.erase(it);
}

NetContext* PluginState::checkContext(void* ctx) {
  if (ctx == nullptr) return &default_ctx_;
  std::lock_guard lock(mu_);
  for (auto& c : contexts_)
    if (&c == ctx) return &c;
  if (ctx == &default_ctx_) return &default_ctx_;
  throw PluginError(Errc::BadUsage, "unknown net context (used after finalize?)");
}

}  // namespace crystal::plugin
