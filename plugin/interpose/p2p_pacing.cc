#include "plugin/interpose/p2p_pacing.h"

#include <exception>
#include <string>
#include <vector>

#include "errors.h"
#include "plugin/interpose/host_session.h"

namespace crystal::interpose {
namespace {

struct Group {
  int depth = 0;
  std::vector<PacedCall> pending;
};
thread_local Group t_group;

void finish(PacedCall& c) noexcept {
  const plugin::AppSpan span(&plugin::AppCallStats::pacing_ns);
  try {
    c.agent->after(c.op);
  } catch (const std::exception& e) {
    // The operation is not followed: the agent's kernel may leave before it ends.
    (void)reportError("P2P pacing", e.what(), kNcclSystemError);
  }
}

}  // namespace

int pacedBefore(NcclComm comm, void* stream, const char* caller,
                std::optional<PacedCall>& out) noexcept {
  if (!plugin::P2pAgent::anyMade()) return kNcclSuccess;  // the common case: one atomic load
  // Inside a group NCCL launches one kernel per comm at its end: the first call of the comm
  // on that stream brackets it (an all-to-all is thousands of grouped sends and receives,
  // and the lookups below are a mutex and a map each).
  if (t_group.depth > 0)
    for (const PacedCall& p : t_group.pending)
      if (p.comm == comm && p.op.stream == stream) return kNcclSuccess;
  try {
    const auto rec = findComm(comm);
    if (!rec) return kNcclSuccess;
    auto agent = plugin::P2pAgent::find(rec->hash);
    if (!agent) return kNcclSuccess;
    const plugin::AppSpan span(&plugin::AppCallStats::pacing_ns);
    out = PacedCall{agent, agent->before(stream), comm};
    return kNcclSuccess;
  } catch (const plugin::PluginError& e) {
    return reportError(caller, e.what(),
                       e.code() == plugin::Errc::BadArgument ? kNcclInvalidUsage : kNcclSystemError);
  } catch (const std::exception& e) {
    return reportError(caller, e.what(), kNcclSystemError);
  }
}

void pacedAfter(std::optional<PacedCall>& call) noexcept {
  if (!call) return;
  if (t_group.depth > 0) {
    try {
      t_group.pending.push_back(std::move(*call));
      return;
    } catch (...) {
    }
  }
  finish(*call);
}

void pacedGroupStarted() noexcept { ++t_group.depth; }

int pacedGroupDepth() noexcept { return t_group.depth; }

void pacedGroupEnded() noexcept {
  if (t_group.depth > 0) --t_group.depth;
  if (t_group.depth > 0) return;
  std::vector<PacedCall> pending;
  pending.swap(t_group.pending);
  for (auto& c : pending) finish(c);
}

void forgetPacing(NcclComm comm) noexcept {
  if (!plugin::P2pAgent::anyMade()) return;
  try {
    if (const auto rec = findComm(comm)) plugin::P2pAgent::forget(rec->hash);
  } catch (const std::exception& e) {
    (void)reportError("P2P pacing", e.what(), kNcclSystemError);
  }
}

}  // namespace crystal::interpose
