// A communicator's lifecycle at the host: declaration, root check-in and reply (bootstrap.cc
// bootstrapRoot semantics for one root), status, stall checks and failure.
#include "comm.h"

#include <fmt/core.h>

#include <algorithm>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "net.h"

namespace crystal::host {

Comm::Comm(HostContext& ctx, std::uint64_t hash, std::uint64_t magic, std::uint64_t root_magic,
           int nranks, std::vector<int> real_ranks, std::string name)
    : ctx_(ctx),
      hash_(hash),
      magic_(magic),
      root_magic_(root_magic),
      nranks_(nranks),
      real_(static_cast<std::size_t>(nranks), 0),
      name_(std::move(name)) {
  addRealRanks(real_ranks);
}

void Comm::addRealRanks(const std::vector<int>& ranks) {
  for (int r : ranks) {
    if (r < 0 || r >= nranks_)
      throw InputError(fmt::format("comm {}: real rank {} outside [0, {})", name_, r, nranks_));
    if (real_[static_cast<std::size_t>(r)] != 0) continue;
    // The root may already have given this rank's ring slot to the host's virtual stand-in.
    if (!check_ins_.empty()) {
      fail(r,
           "declared real after the comm's first check-in; declare every real rank of a "
           "communicator before any of them calls ncclCommInitRank");
      return;
    }
    real_[static_cast<std::size_t>(r)] = 1;
  }
}

CommStatus Comm::status() const {
  CommStatus st;
  st.comm_hash = hash_;
  st.parent_hash = parent_hash_;
  st.nranks = nranks_;
  st.phase = phase_;
  int done = static_cast<int>(ags_.size());
  for (const auto& e : endpoints_) done = std::min({done, e.rx_ag, e.tx_ag});
  if (endpoints_.empty()) done = 0;
  st.allgathers_done = done;
  for (int r = 0; r < nranks_; ++r)
    if (isReal(r)) st.real_ranks.push_back(r);
  return st;
}

VirtualRankContext Comm::virtualContext(int rank) const {
  return {hash_, rank, nranks_, ctx_.options->gpus_per_node, ctx_.p2p_port};
}

void Comm::fail(int rank, const std::string& message) {
  if (phase_ == CommPhase::Failed) return;
  phase_ = CommPhase::Failed;
  HostError err;
  err.comm_hash = hash_;
  err.rank = rank;
  err.message = rank >= 0 ? fmt::format("comm {} ({:#x}) rank {}: {}", name_, hash_, rank, message)
                          : fmt::format("comm {} ({:#x}): {}", name_, hash_, message);
  CRYSTAL_ERROR("{}", err.message);
  for (StreamId id : streams_) ctx_.loop->close(id);
  streams_.clear();
  for (auto& e : endpoints_) e.closed = true;
  if (ctx_.report) ctx_.report(err);
}

void Comm::onCheckIn(const wire::ExtInfo& info) {
  if (phase_ == CommPhase::Failed) return;
  const int r = info.rank;
  if (info.nranks != nranks_ || info.nroots != 1 || info.iroot != 0) {
    fail(r, fmt::format("check-in says nranks {} nroots {} iroot {}; host expects nranks {} with "
                        "one root (iroot 0)",
                        info.nranks, info.nroots, info.iroot, nranks_));
    return;
  }
  if (r < 0 || r >= nranks_) {
    fail(-1, fmt::format("check-in from rank {} outside [0, {})", r, nranks_));
    return;
  }
  if (!isReal(r)) {
    fail(r, "checked in, but the emulation declares this rank virtual");
    return;
  }
  if (check_ins_.count(r) != 0) {
    fail(r, "checked in twice");
    return;
  }
  if (info.listen_root_address.isZero() || info.connect_info.addr().isZero()) {
    fail(r, "check-in with a zero root-listen or ring address");
    return;
  }
  if (check_ins_.empty()) first_check_in_ = Clock::now();
  check_ins_[r] = info;
  if (phase_ == CommPhase::Declared) phase_ = CommPhase::CheckIn;
  const int next = (r + 1) % nranks_;
  const int prev = (r - 1 + nranks_) % nranks_;
  if (!isReal(next) || check_ins_.count(next) != 0) sendRootReply(r);
  if (isReal(prev) && prev != r && check_ins_.count(prev) != 0 && replied_.count(prev) == 0)
    sendRootReply(prev);
  if (!isReal(prev)) connectAsPrev(r, info.connect_info.addr());
}

void Comm::sendRootReply(int rank) {
  const int next = (rank + 1) % nranks_;
  const wire::RingConnectInfo next_info =
      isReal(next) ? check_ins_.at(next).connect_info
                   : wire::RingConnectInfo::fromAddr(aliasAddress(next, ctx_.ring_port));
  replied_.insert(rank);
  std::vector<std::byte> out;
  wire::appendHandshake(out, root_magic_, wire::kSocketTypeBootstrap);
  wire::appendFrame(out, wire::bytesOf(next_info));
  const auto to = check_ins_.at(rank).listen_root_address;
  try {
    const StreamId id = ctx_.loop->adopt(connectTcp(to), true, fmt::format("root->{}", rank));
    streams_.insert(id);
    Stream* s = ctx_.loop->find(id);
    s->on_closed = [this, rank, to](Stream&, const std::string& why) {
      fail(rank, fmt::format("root reply to {} failed: {}", to.str(), why));
    };
    s->send(out);
    s->closeAfterFlush();
  } catch (const ProtocolError& e) {
    fail(rank, fmt::format("root reply to {}: {}", to.str(), e.what()));
  }
}

void Comm::checkStall(Clock::time_point now) {
  if (phase_ == CommPhase::Failed || phase_ == CommPhase::Destroyed) return;
  const auto limit = ctx_.options->stall_timeout;
  const auto real_count = static_cast<std::size_t>(std::count(real_.begin(), real_.end(), 1));
  if (root_magic_ != 0 && !check_ins_.empty() && check_ins_.size() < real_count &&
      now - first_check_in_ > limit) {
    for (int r = 0; r < nranks_; ++r)
      if (isReal(r) && check_ins_.count(r) == 0) {
        fail(r, fmt::format("did not check in within {} ms of the first real rank", limit.count()));
        return;
      }
  }
  for (auto& e : endpoints_) {
    if (e.closed) continue;
    Stream* s = ctx_.loop->find(e.stream);
    if (s != nullptr && s->waiting() && now - s->since() > limit) {
      fail(e.rank, fmt::format("silent for {} ms in all-gather #{} step {} (ring {})",
                               limit.count(), e.rx_ag, e.rx_step, e.host_is_next ? 0 : 1));
      return;
    }
  }
}

}  // namespace crystal::host
