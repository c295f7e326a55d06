// The interposer's side of P2P pacing (plugin/p2p_agent.h): each collective and p2p call on a
// communicator with a P2P agent is bracketed by the agent's before() and after(), so its
// pacing thread knows when the stream reaches and leaves the operation. A call inside
// ncclGroupStart/End is enqueued only at the outermost ncclGroupEnd, so its after() waits
// for that (per thread, like NCCL's group depth), and only a group's first call per comm and
// stream is bracketed. Nothing here throws.
#pragma once

#include <memory>
#include <optional>

#include "app_call_stats.h"
#include "p2p_agent.h"
#include "plugin/interpose/real_nccl.h"

namespace crystal::interpose {

struct PacedCall {
  std::shared_ptr<plugin::P2pAgent> agent;
  plugin::P2pAgent::Op op;
  NcclComm comm = nullptr;
};

// Before NCCL's call on `comm`: `out` set when the comm is paced. Returns an NCCL code (and
// prints why) when the call must not go on (a CUDA error, a stream under graph capture).
[[nodiscard]] int pacedBefore(NcclComm comm, void* stream, const char* caller,
                              std::optional<PacedCall>& out) noexcept;
// After it (whatever it returned): now, or at the outermost ncclGroupEnd.
void pacedAfter(std::optional<PacedCall>& call) noexcept;
void pacedGroupStarted() noexcept;
void pacedGroupEnded() noexcept;
[[nodiscard]] int pacedGroupDepth() noexcept;  // this thread's ncclGroupStart/End nesting
// ncclCommDestroy/Abort: the comm's agent stops.
void forgetPacing(NcclComm comm) noexcept;

// The call `call()` bracketed for `comm`, its host time counted (app_call_stats.h). `root`:
// a broadcast's or reduce's (the pacing of a chain needs it; NCCL's tuner does not say it).
template <typename Call>
int withPacing(NcclComm comm, void* stream, const char* caller, Call&& call, int root = -1) {
  using plugin::AppCallStats;
  const plugin::AppOperation operation(pacedGroupDepth() == 0);  // ends after `whole`
  const plugin::AppSpan whole(&AppCallStats::call_ns, &AppCallStats::calls);
  if (plugin::appCallStatsOn() && pacedGroupDepth() == 0) ++plugin::appCallStats().ungrouped;
  std::optional<PacedCall> paced;
  if (const int rc = pacedBefore(comm, stream, caller, paced); rc != kNcclSuccess) return rc;
  if (paced) paced->op.root = root;
  int rc = kNcclSuccess;
  {
    const plugin::AppSpan nccl(&AppCallStats::call_nccl_ns);
    rc = call();
  }
  pacedAfter(paced);
  return rc;
}

}  // namespace crystal::interpose
