#include "p2p_pacer.h"

#include <algorithm>

namespace crystal::plugin {

RingOpShape ringOpShape(const std::optional<live::CollectiveEntry>& op, int nranks,
                        int connected) {
  RingOpShape s;
  s.unit_bytes = kP2pSimpleStepBytes;
  if (!op || op->algo != model::Algo::Ring || nranks < 2) return s;
  const int channels = std::max(1, op->channels > 0 ? op->channels : connected);
  const auto n = static_cast<std::uint64_t>(nranks);
  const std::uint64_t bytes = op->bytes;  // NCCL's nBytes: the all-gather/reduce-scatter buffer
  std::uint64_t chunks_per_loop = 1, steps_per_loop = 1, chunk_steps = 1;
  // Per channel: the chunks a member sends per loop (enqueue.cc's patterns) and what they carry.
  double sent_fraction = 1;
  switch (op->func) {
    case model::Func::AllReduce:  // ncclPatternRingTwice
      s.symmetric = true;
      chunks_per_loop = n;
      steps_per_loop = 2 * (n - 1);
      chunk_steps = kNcclSteps / 2;  // ALLREDUCE_CHUNKSTEPS
      s.slice_steps = kNcclSteps / 4;
      sent_fraction = 2.0 * static_cast<double>(n - 1) / static_cast<double>(n);
      break;
    case model::Func::AllGather:
    case model::Func::ReduceScatter:  // ncclPatternRing
      s.symmetric = true;
      chunks_per_loop = n;
      steps_per_loop = n - 1;
      chunk_steps = kNcclSteps / 2;
      s.slice_steps = kNcclSteps / 4;
      sent_fraction = static_cast<double>(n - 1) / static_cast<double>(n);
      break;
    case model::Func::Broadcast:
    case model::Func::Reduce:  // ncclPatternPipelineFrom/To, 1-step chunks and slices
      break;
    default:
      return s;
  }
  s.slices_per_step = static_cast<int>(chunk_steps) / s.slice_steps;
  const std::uint64_t chunk = kP2pSimpleStepBytes * chunk_steps;
  const std::uint64_t loop = static_cast<std::uint64_t>(channels) * chunks_per_loop * chunk;
  const std::uint64_t loops = std::max<std::uint64_t>(1, (bytes + loop - 1) / loop);
  s.units = steps_per_loop * loops * static_cast<std::uint64_t>(s.slices_per_step);
  const double per_channel = static_cast<double>(bytes) * sent_fraction / channels;
  s.unit_bytes = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(per_channel / static_cast<double>(s.units) + 0.5));
  return s;
}

P2pPacer::P2pPacer(int nranks, MakeChannel make, live::RingHop send_hop)
    : nranks_(nranks), make_(std::move(make)), send_hop_(send_hop) {}

int P2pPacer::add(bool send, int ordinal) {
  const int i = static_cast<int>(conns_.size());
  Channel& ch = channels_[ordinal];
  if (!ch.ring) ch.ring = make_();
  (send ? ch.send : ch.recv) = i;
  Conn c;
  c.send = send;
  c.channel = ordinal;
  conns_.push_back(c);
  return i;
}

void P2pPacer::endOp() {
  if (!in_op_) return;
  in_op_ = false;
  for (auto& [ordinal, ch] : channels_) {
    if (ch.recv_in_op) ch.ring->recvDone(true);
    ch.recv_in_op = false;
  }
}

void P2pPacer::opsDone() { endOp(); }

void P2pPacer::opStarted(live::TimeNs now, const std::optional<live::CollectiveEntry>& op) {
  endOp();
  in_op_ = true;
  op_start_ = now;
  int connected = 0;
  for (const auto& [ordinal, ch] : channels_) connected += ch.send >= 0 || ch.recv >= 0;
  shape_ = ringOpShape(op, nranks_, connected);
  op_channels_ = op && op->channels > 0 ? op->channels : 0;
  // V takes a slice as fast as the channel's share of R's link carries it (RingChannel's
  // postSend, without its queueing: the agent chains the slices).
  const int running = std::max(1, op_channels_ > 0 ? op_channels_ : connected);
  slice_ns_ = send_hop_.occupancy(shape_.unit_bytes, running, running);
  for (auto& [ordinal, ch] : channels_) {
    ch.op_sends = 0;
    ch.op_recv_base = ch.recv >= 0 ? conns_[static_cast<std::size_t>(ch.recv)].scheduled : 0;
    ch.op_recv_done = 0;
  }
}

void P2pPacer::observe(int i, std::uint64_t value, live::TimeNs now) {
  if (i < 0 || i >= size()) return;
  Conn& c = conns_[static_cast<std::size_t>(i)];
  if (value <= c.seen) return;
  if (!c.send) {  // R emptied slots
    c.seen = value;
    return;
  }
  // R filled slots: one unit per slice (a poll may see several at once). The ring model
  // learns the slices' sizes from them; the agent returns their credits.
  Channel& ch = channels_[c.channel];
  const auto step = static_cast<std::uint64_t>(sliceSteps());
  while (c.seen < value) {
    (void)ch.ring->postSend(now, shape_.unit_bytes, op_channels_);
    ++ch.op_sends;
    c.seen = std::min(value, c.seen + step);
  }
}

live::TimeNs P2pPacer::schedule(live::TimeNs now, std::vector<P2pEntry>& out, const Room& room) {
  live::TimeNs next = kNever;
  if (!in_op_) return next;
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    Conn& c = conns_[i];
    if (c.send) continue;
    Channel& ch = channels_[c.channel];
    std::size_t space = room(static_cast<int>(i));
    while (space > 0) {
      std::uint64_t end = 0;
      if (shape_.symmetric) {
        if (ch.op_sends == 0 ||
            ch.op_recv_done >= std::max<std::uint64_t>(shape_.units, ch.op_sends))
          break;
        end = ch.op_recv_base + (ch.op_recv_done + 1) * static_cast<std::uint64_t>(sliceSteps());
      } else {
        // One step ahead of what R consumed, at most.
        if (c.scheduled > c.seen) break;
        end = c.scheduled + 1;
      }
      const std::uint64_t unit = ch.recv_units;
      ch.ring->postRecv(unit, op_start_, !ch.recv_in_op, shape_.slices_per_step,
                        static_cast<int>(model::Proto::Simple), op_channels_,
                        ch.recv_in_op ? 0 : 1);
      ch.recv_in_op = true;
      const auto arrival = ch.ring->recvArrival(unit, op_start_, shape_.unit_bytes, now);
      if (!arrival) {  // the model waits for R's send to size it: look again soon
        next = std::min(next, now + 1000);
        break;
      }
      out.push_back({static_cast<int>(i), *arrival, end});
      c.scheduled = end;
      ++ch.recv_units;
      ++ch.op_recv_done;
      --space;
    }
  }
  return next;
}

}  // namespace crystal::plugin
