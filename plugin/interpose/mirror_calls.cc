#include "plugin/interpose/mirror_calls.h"

#include <exception>
#include <string>
#include <utility>

#include "crystal/base/log.h"
#include "mirror_group.h"
#include "mirror_kernel.h"
#include "params.h"
#include "plugin/interpose/host_session.h"
#include "state.h"

namespace crystal::interpose {
namespace {

namespace cp = crystal::plugin;

// NCCL's group depth is per thread; so is what waits for the outermost end.
thread_local cp::MirrorGroup t_group;

// The emulation's data policy is mirror, for a communicator this process created through the
// host (emulation mode).
const crystal::Config* mirrorConfig(NcclComm comm, CommRecord* rec) {
  const auto r = findComm(comm);
  if (!r) return nullptr;
  cp::PluginState& st = cp::PluginState::get();
  st.ensureInit();
  if (st.dataPolicy() != crystal::DataPolicy::Mirror) return nullptr;
  *rec = *r;
  return &st.config();
}

bool resultsOn() {
  static const bool on = cp::paramBool("CRYSTAL_MIRROR_RESULTS");
  return on;
}

int run(const char* caller, cp::MirrorResult& m) {
  try {
    cp::cuda::Function k = nullptr;
    std::string why;
    if (m.needsKernel() && !(k = cp::mirrorKernel(&why))) {
      m.cancel();  // planned with a kernel: only a context switch in between could lose it
      return kNcclSuccess;
    }
    m.after(k);
    return kNcclSuccess;
  } catch (const std::exception& e) {
    m.cancel();
    return reportError(caller, e.what(), kNcclSystemError);
  }
}

void sayOnce(bool& said, const char* text) {
  if (!said) CRYSTAL_INFO("{}", text);
  said = true;
}

}  // namespace

std::optional<cp::MirrorResult> mirrorBroadcast(const void* sendbuff, void* recvbuff,
                                                std::size_t count, int type, int root,
                                                NcclComm comm, void* stream) {
  CommRecord rec;
  const crystal::Config* cfg = mirrorConfig(comm, &rec);
  if (!cfg || !cp::broadcastRootIsVirtual(rec.rank, rec.nranks, root, cfg->emulation.real_ranks,
                                          cfg->job.world_size))
    return std::nullopt;
  return cp::MirrorResult(sendbuff, recvbuff, count, type, cp::MirrorAction::Copy, 1, stream);
}

std::optional<cp::MirrorResult> mirrorReduction(const void* source, void* recvbuff,
                                                std::size_t count, int type, int op,
                                                NcclComm comm, void* stream) {
  CommRecord rec;
  const crystal::Config* cfg = mirrorConfig(comm, &rec);
  if (!cfg || !resultsOn() || rec.nranks < 2 || cp::ncclTypeBytes(type) == 0) return std::nullopt;
  if (cfg->emulation.real_ranks.size() != 1) {
    static thread_local bool said = false;
    sayOnce(said, "crystal: mirror: reductions keep what the data path delivered (several real "
                  "ranks: a virtual rank's copy is of its own class's real rank)");
    return std::nullopt;
  }
  const auto action = cp::reductionAction(op);
  if (!action) {
    static thread_local bool said = false;
    sayOnce(said, "crystal: mirror: a reduction with a custom op (ncclRedOpCreatePreMulSum) "
                  "keeps what the data path delivered");
    return std::nullopt;
  }
  std::string why;
  if (*action != cp::MirrorAction::Copy && !cp::mirrorKernel(&why)) return std::nullopt;
  return cp::MirrorResult(source, recvbuff, count, type, *action,
                          static_cast<std::uint64_t>(rec.nranks), stream);
}

int mirrorBefore(const char* caller, std::optional<cp::MirrorResult>& m) {
  if (!m) return kNcclSuccess;
  try {
    m->before();
    return kNcclSuccess;
  } catch (const std::exception& e) {
    m.reset();
    return reportError(caller, e.what(), kNcclSystemError);
  }
}

int mirrorAfter(const char* caller, int rc, std::optional<cp::MirrorResult>& m) {
  if (!m) return rc;
  if (rc != kNcclSuccess) {
    // ncclInProgress (a nonblocking communicator) launches later, from NCCL's own thread: a
    // rewrite enqueued now would run before the collective.
    if (rc == kNcclInProgress) {
      static thread_local bool said = false;
      sayOnce(said, "crystal: mirror: results of a nonblocking communicator's collectives are "
                    "left as the data path delivered them");
    }
    m->cancel();
    return rc;
  }
  if (t_group.open()) {
    try {
      t_group.defer(std::move(*m));
    } catch (const std::exception& e) {  // allocation
      m->cancel();
      return reportError(caller, e.what(), kNcclSystemError);
    }
    m.reset();
    return rc;
  }
  return run(caller, *m);
}

void mirrorGroupStarted() noexcept { t_group.started(); }

int mirrorGroupEnded(const char* caller, int rc, bool launched) noexcept {
  const int r = t_group.ended(launched && rc == kNcclSuccess,
                              [caller](cp::MirrorResult& m) { return run(caller, m); });
  return rc != kNcclSuccess ? rc : r;
}

void mirrorCommCreated(std::uint64_t hash) noexcept {
  try {
    cp::PluginState& st = cp::PluginState::get();
    st.ensureInit();
    if (st.dataPolicy() != crystal::DataPolicy::Mirror || !resultsOn() ||
        st.config().emulation.real_ranks.size() != 1)
      return;
    std::string why;
    if (cp::mirrorKernel(&why)) st.setResultsRewritten(hash, true);  // else: logged once
  } catch (const std::exception& e) {
    CRYSTAL_WARN("crystal: mirror: {}", e.what());
  }
}

void mirrorCustomOp(NcclComm comm) noexcept {
  try {
    const auto rec = findComm(comm);
    if (!rec) return;
    cp::PluginState& st = cp::PluginState::get();
    if (!st.resultsRewritten(rec->hash)) return;
    st.setResultsRewritten(rec->hash, false);
    CRYSTAL_INFO("crystal: mirror: a custom reduction op on communicator {:x}: its reductions "
                 "keep what the data path delivers from now on (the rewrite does not know the "
                 "op's scalar)",
                 rec->hash);
  } catch (const std::exception& e) {
    CRYSTAL_WARN("crystal: mirror: {}", e.what());
  }
}

}  // namespace crystal::interpose
