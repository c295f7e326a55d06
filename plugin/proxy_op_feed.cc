// Connects NCCL's profiler (plugin/profiler/, when NCCL_PROFILER_PLUGIN names this library)
// to the net plugin's operation queues (op_segments.h): proxy-op events are asked for only
// when this library is also the communicator's net plugin (ring timing and the mirror
// pairing both need them).
// NCCL initialises a communicator's net plugin before its profiler (init.cc: commAlloc,
// then initTransportsRank), so the policy is known when the profiler asks.
#include <cstdio>
#include <exception>

#include "p2p_agent.h"
#include "params.h"
#include "plugin/profiler/proxy_ops.h"
#include "state.h"

namespace crystal::plugin {
namespace {

bool wanted() {
  try {
    PluginState& st = PluginState::get();
    return st.initialized();
  } catch (...) {
    return false;
  }
}

void started(const profiler::ProxyOpStart& s) {
  try {
    PluginState::get().proxyOpStarted(s);
  } catch (...) {  // a lost event only costs the pairing of one operation
  }
}

bool collWanted(std::uint64_t comm) {
  try {
    return PluginState::get().feedsProxyOps(comm);
  } catch (...) {
    return true;
  }
}

// CRYSTAL_KERNEL_CH=1: NCCL's kernel-channel stamps go to the comm's P2P pacing agent, which
// counts and traces them beside its own marks of R's stream (docs/plugin.md).
void kernelCh(const profiler::KernelChStamp& s) {
  try {
    if (auto agent = P2pAgent::find(s.comm)) agent->kernelCh(s);
  } catch (...) {
  }
}

bool kernelChWanted() {
  try {
    return paramBool("CRYSTAL_KERNEL_CH");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crystal: %s; kernel-channel stamps stay off\n", e.what());
    return false;
  }
}

[[maybe_unused]] const bool kRegistered = [] {
  profiler::setProxyOpObserver(
      {&wanted, &started, &collWanted, kernelChWanted() ? &kernelCh : nullptr});
  return true;
}();

}  // namespace
}  // namespace crystal::plugin
