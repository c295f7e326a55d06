#include "crystal/live/ring_timing.h"

#include <algorithm>
#include <stdexcept>

namespace crystal::live {

RingChannel::RingChannel(std::vector<RingHop> chain, RingHop in, int slices,
                         std::shared_ptr<std::atomic<int>> busy,
                         std::shared_ptr<std::atomic<int>> connected)
    : period_(static_cast<int>(chain.size())),
      slices_(std::max(1, slices)),
      chains_{chain, chain, chain},
      ins_{in, in, in},
      busy_(busy ? std::move(busy) : std::make_shared<std::atomic<int>>(0)),
      connected_(connected ? std::move(connected) : std::make_shared<std::atomic<int>>(0)),
      posted_(kWindow, 0),
      bytes_(kWindow, 0),
      op_lag_(static_cast<std::uint64_t>(slices_)),
      free_at_(std::max<std::size_t>(1, chain.size()), 0),
      delivered_(kWindow * std::max<std::size_t>(1, chain.size()), 0) {
  if (chain.empty()) throw std::invalid_argument("RingChannel: empty chain");
}

void RingChannel::setProtocolHops(int proto, std::vector<RingHop> chain, RingHop in) {
  if (proto < 0 || proto > 2 || static_cast<int>(chain.size()) != period_)
    throw std::invalid_argument("RingChannel: protocol hops of another shape");
  std::lock_guard lock(mu_);
  chains_[static_cast<std::size_t>(proto)] = std::move(chain);
  ins_[static_cast<std::size_t>(proto)] = in;
}

void RingChannel::setChainOpCost(int proto, ChainOpCost cost) {
  if (proto < 0 || proto > 2) throw std::invalid_argument("RingChannel: no such protocol");
  std::lock_guard lock(mu_);
  chain_costs_[static_cast<std::size_t>(proto)] = cost;
}

TimeNs RingChannel::postSend(TimeNs now, std::uint64_t bytes, int channels) {
  std::lock_guard lock(mu_);
  if (channels > 0) op_channels_ = channels;
  const std::uint64_t u = sends_++;
  posted_[slot(u)] = now;
  bytes_[slot(u)] = bytes;
  if (have_op_ && u >= op_first_) op_bytes_ = bytes;
  // A send outside any receive of an operation is a chain root's (broadcast, reduce): its
  // pace is the chain's slowest link, as NCCL's send window lets it run at most 8 slots ahead
  // of the slowest hop downstream (on 8 x 8 H200 the NET, 400 GB/s, not NVLink's 450). In a
  // ring the receives carry that pace, and the real rank's sends follow its own link.
  const RingHop& out = in_op_ ? chain()[0] : slowest();
  const TimeNs d = transmit(out, real_free_, now, bytes, /*own=*/true);
  // Done once the data left the real rank's share of the link: the model has no send window,
  // so NCCL's 8-step credit (freed by this completion) must not wait for the hop latency.
  return d - latencyOf(out);
}

TimeNs RingChannel::sendOccupancy(std::uint64_t bytes, int channels) {
  std::lock_guard lock(mu_);
  const int ch = channels > 0 ? channels : op_channels_;
  const RingHop& out = in_op_ ? chain()[0] : slowest();
  const int busy = std::max(busy_->load(std::memory_order_relaxed), ch);
  return out.occupancy(bytes, busy, ch > 0 ? ch : connected_->load(std::memory_order_relaxed),
                       /*slice_time=*/false);
}

TimeNs RingChannel::transmit(const RingHop& hop, TimeNs& free_at, TimeNs ready,
                             std::uint64_t bytes, bool own) {
  const TimeNs start = std::max(ready, free_at);
  // The link is shared by the channels running the operation: those with receives
  // outstanding, and at least the collective's own count when NCCL's profiler gave it (a
  // broadcast root only sends, and has no receive to count).
  const int busy = std::max(busy_->load(std::memory_order_relaxed), op_channels_);
  free_at = start + hop.occupancy(bytes, busy,
                                  op_channels_ > 0
                                      ? op_channels_
                                      : connected_->load(std::memory_order_relaxed),
                                  sliceTime() && !own);
  return free_at + latencyOf(hop);
}

RingChannel::ChainTiming RingChannel::chainTo(int hops, std::uint64_t bytes, int channels,
                                              std::uint64_t units, bool reduce,
                                              ChainTarget target) {
  std::lock_guard lock(mu_);
  return chainToLocked(hops, bytes, channels, units, reduce, target);
}

RingChannel::ChainTiming RingChannel::chainWay(int hops, std::uint64_t bytes, int busy, int running,
                                               TimeNs* crossing) const {
  // A chain has no slice time: its hop is the crossing of the bytes and the whole latency.
  auto way = [&](const RingHop& h) {
    return h.occupancy(bytes, busy, running, /*slice_time=*/false) + h.latency_ns + h.unit_ns;
  };
  // The member m places before the real rank sends over the hop of its node position, which
  // the chain holds from the real rank's own on (one member per period: `in`).
  auto before = [&](int m) -> const RingHop& {
    if (period_ == 1) return in();
    return chain()[static_cast<std::size_t>((period_ - m % period_) % period_)];
  };
  ChainTiming t;
  TimeNs slowest_crossing = 0;  // of a member before the real rank
  // The way over the members 1..upto places before the real rank.
  auto pass = [&](int upto) {
    TimeNs sum = 0;
    for (int m = 1; m <= upto; ++m) {
      const RingHop& h = before(m);
      sum += way(h);
      slowest_crossing =
          std::max(slowest_crossing, h.occupancy(bytes, busy, running, /*slice_time=*/false));
    }
    return sum;
  };
  // The hops repeat every period (one member of each node position): a whole period's way
  // times the periods the chain spans, and the rest (8191 hops cost as few as 8: this runs on
  // NCCL's proxy thread for every channel of every operation).
  if (hops > 0) {
    const int period = std::max(1, period_);
    if (hops >= period) t.fill = static_cast<TimeNs>(hops / period) * pass(period);
    t.fill += pass(hops % period);
  }
  t.last_hop = hops > 0 ? way(before(1)) : 0;
  t.pace = slowest().occupancy(bytes, busy, running, /*slice_time=*/false);
  if (crossing != nullptr) *crossing = slowest_crossing;
  return t;
}

RingChannel::ChainTiming RingChannel::chainToLocked(int hops, std::uint64_t bytes, int channels,
                                                    std::uint64_t units, bool reduce,
                                                    ChainTarget target) {
  const int ch = channels > 0 ? channels : op_channels_;
  const int busy = std::max(busy_->load(std::memory_order_relaxed), ch);
  const int running = ch > 0 ? ch : connected_->load(std::memory_order_relaxed);
  TimeNs crossing = 0;
  ChainTiming t = chainWay(hops, bytes, busy, running, &crossing);
  if (hops > 0) t.op = chain_costs_[op_proto_].opNs(units, bytes, crossing, reduce);
  if (hops > 0 && target.channels > 0 && target.channels != running && target.unit_bytes > 0) {
    // The real rank's units come at the target's aggregate pace (each on a link shared by
    // `running` channels), the first once the target's chain brought as many bytes on every
    // channel: its fill, and the real pace's excess over its own, if any.
    TimeNs target_crossing = 0;
    const ChainTiming tt =
        chainWay(hops, target.unit_bytes, target.channels, target.channels, &target_crossing);
    t.fill = tt.fill + std::max<TimeNs>(0, t.pace - tt.pace);
    if (units > 0 && target.units > 0)
      t.op = chain_costs_[op_proto_].opNs(target.units, target.unit_bytes, target_crossing, reduce);
  }
  return t;
}

void RingChannel::startChain(std::uint64_t unit, TimeNs now, const ChainRecv& c, int channels) {
  std::lock_guard lock(mu_);
  const ChainKey key{c.hops, c.unit_bytes, channels, c.reduce};
  const bool streams = chain_last_ && key == chain_key_ && unit >= chain_first_;
  chain_op_ = chain_last_ = c.hops > 0 && c.unit_bytes > 0;
  if (!chain_op_) return;
  const ChainTiming t = chainToLocked(c.hops, c.unit_bytes, channels, c.units, c.reduce);
  const TimeNs first =
      chainFirstArrival(c.issued > 0 ? std::min(c.issued, now) : now, t.fill, streams,
                        chain_start_ + static_cast<TimeNs>(unit - chain_first_) * chain_pace_,
                        chain_start_, chain_op_ns_);
  chain_key_ = key;
  chain_first_ = unit;
  chain_start_ = first;
  chain_pace_ = t.pace;
  chain_op_ns_ = t.op;
}

void RingChannel::recvDone(bool idle) {
  if (!idle) return;
  std::lock_guard lock(mu_);
  if (in_op_) busy_->fetch_sub(1, std::memory_order_relaxed);
  in_op_ = false;
}

void RingChannel::postRecv(std::uint64_t unit, TimeNs now, bool idle, int units_per_step,
                           int proto, int channels, int first) {
  if (!idle && first != 1) return;
  std::lock_guard lock(mu_);
  if (channels > 0) op_channels_ = channels;
  if (!in_op_) busy_->fetch_add(1, std::memory_order_relaxed);
  in_op_ = true;
  // NCCL's profiler placed the receive in the middle of its operation: the chain goes on, however
  // long the real rank left the connection without a receive.
  if (first == 0) return;
  // Not placed: an idle connection is a new operation once the real rank sent every unit
  // before this one (or sent nothing in the last: a receive-only connection). Otherwise a slow
  // real rank let its receives run dry in the middle of one (the GPU had not freed a slot
  // yet): the chain goes on as it was.
  if (first < 0 && have_op_ && sends_ < unit && op_bytes_ != 0) return;
  TimeNs start = now;
  std::uint64_t sent_bytes = 0;
  // The real rank's send of this unit came first (after the previous operation started):
  // the operation started then.
  if (unit < sends_ && unit + kWindow > sends_ && (!have_op_ || posted_[slot(unit)] >= op_start_)) {
    start = std::min(start, posted_[slot(unit)]);
    sent_bytes = bytes_[slot(sends_ - 1)];
  }
  // The previous operation had no send of the real rank: a receive-only connection.
  recv_only_ = have_op_ && op_bytes_ == 0 && sent_bytes == 0;
  // startChain says whether a placed operation is a chain; an unplaced one is none.
  chain_op_ = false;
  if (first < 0) chain_last_ = false;
  have_op_ = true;
  op_first_ = unit;
  op_start_ = start;
  op_lag_ = static_cast<std::uint64_t>(units_per_step > 0 ? units_per_step : slices_);
  op_proto_ = proto >= 0 && proto <= 2 ? static_cast<std::size_t>(proto) : kSimple;
  op_bytes_ = sent_bytes;
  frontier_ = std::max(frontier_, unit);
}

void RingChannel::advance(std::uint64_t upto, std::uint64_t capacity) {
  const int p = period_;
  for (; frontier_ <= upto; ++frontier_) {
    const std::uint64_t u = frontier_;
    const std::uint64_t b = sentInOp(u) ? bytes_[slot(u)] : op_bytes_ > 0 ? op_bytes_ : capacity;
    // From the operation's second step on, a member forwards what the one before it sent a
    // step earlier; position 0 (the idealised copy of the real rank) gets it from the chain's
    // end, by periodicity.
    const bool forwards = u >= op_first_ + op_lag_;
    for (int pos = 0; pos < p; ++pos) {
      TimeNs ready = op_start_;
      if (forwards) ready = std::max(ready, delivered(pos == 0 ? p - 1 : pos - 1, u - op_lag_));
      const RingHop& hop = p == 1 ? in() : chain()[static_cast<std::size_t>(pos)];
      delivered(pos, u) = transmit(hop, free_at_[static_cast<std::size_t>(pos)], ready, b);
    }
  }
}

std::optional<TimeNs> RingChannel::recvArrival(std::uint64_t unit, TimeNs posted,
                                               std::uint64_t bytes, TimeNs now) {
  std::lock_guard lock(mu_);
  if (chain_op_ && unit >= chain_first_)
    return std::max(posted, chain_start_ + static_cast<TimeNs>(unit - chain_first_) * chain_pace_);
  const RingHop& in = period_ == 1 ? this->in() : chain().back();
  if (!have_op_) {  // a receive nobody announced: it starts an operation
    have_op_ = true;
    op_first_ = unit;
    op_start_ = posted;
    op_lag_ = static_cast<std::uint64_t>(slices_);
    frontier_ = std::max(frontier_, unit);
  }
  if (unit < frontier_) {
    // Computed already (a repeated question), or older than the window: the member before
    // is taken as ready.
    if (unit + kWindow > frontier_) return std::max(posted, delivered(period_ - 1, unit));
    TimeNs free = posted;
    return transmit(in, free, posted, bytes);
  }
  if (op_bytes_ == 0 && !sentInOp(unit)) {
    // No send of this operation yet to say the unit's size. A ring's comes at once (step 0
    // needs no data); a connection that does not pair as a ring's (the end of a broadcast
    // chain) gets its receive's own size once it waited a few steps.
    const TimeNs step_ns = in.occupancy(bytes, 1, 0, sliceTime()) + latencyOf(in);
    const bool recv_only = recv_only_ && now >= posted + step_ns;
    if (!recv_only && now - op_start_ <= kStallSteps * step_ns + kStallSlackNs) return std::nullopt;
  }
  advance(unit, bytes);
  return std::max(posted, delivered(period_ - 1, unit));
}

}  // namespace crystal::live
