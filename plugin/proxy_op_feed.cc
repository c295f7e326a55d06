// Connects NCCL's profiler (plugin/profiler/, when NCCL_PROFILER_PLUGIN names this library)
// to the net plugin's operation queues (op_segments.h): proxy-op events are asked for only
// when this library is also the communicator's net plugin (ring timing and the mirror
// pairing both need them).
// NCCL initialises a communicator's net plugin before its profiler (init.cc: commAlloc,
// then initTransportsRank), so the policy is known when the profiler asks.
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

[[maybe_unused]] const bool kRegistered = [] {
  profiler::setProxyOpObserver({&wanted, &started, &collWanted});
  return true;
}();

}  // namespace
}  // namespace crystal::plugin
