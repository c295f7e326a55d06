#include "p2p_pacer.h"

#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <utility>

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

P2pPacer::P2pPacer(int nranks, MakeChannel make, int rank)
    : nranks_(nranks), rank_(rank), make_(std::move(make)) {}

std::optional<int> P2pPacer::chainHops(const std::optional<live::CollectiveEntry>& op) const {
  if (!op || op->algo != model::Algo::Ring) return std::nullopt;
  if (op->func != model::Func::Broadcast && op->func != model::Func::Reduce) return std::nullopt;
  return live::chainHops(op->root, op->func == model::Func::Reduce, rank_, nranks_);
}

void P2pPacer::setTrees(MakeTree make_tree, PlanTree plan) {
  make_tree_ = std::move(make_tree);
  plan_tree_ = std::move(plan);
}

int P2pPacer::add(bool send, int ordinal, bool tree_only, bool tree_parent) {
  const int i = static_cast<int>(conns_.size());
  Channel& ch = channels_[ordinal];
  if (!ch.ring) ch.ring = make_(true);
  if (tree_only)
    (send ? ch.tree_send : ch.tree_recv) = i;
  else
    (send ? ch.send : ch.recv) = i;
  Conn c;
  c.send = send;
  c.tree_only = tree_only;
  c.tree_parent = tree_parent;
  c.ch = &ch;  // std::map nodes stay put
  conns_.push_back(std::move(c));
  return i;
}

std::vector<int> P2pPacer::wantNetRings() const {
  std::vector<int> out;
  for (const auto& [ordinal, ch] : channels_)
    if (ch.send >= 0 && ch.recv < 0 && !ch.net_ring) out.push_back(ordinal);
  return out;
}

void P2pPacer::setNetRing(int ordinal, std::shared_ptr<live::RingChannel> ring) {
  const auto it = channels_.find(ordinal);
  if (it != channels_.end()) it->second.net_ring = std::move(ring);
}

void P2pPacer::endOp() {
  if (!in_op_) return;
  in_op_ = false;
  tree_op_ = false;
  for (auto& [ordinal, ch] : channels_) {
    if (ch.recv_in_op) ch.ring->recvDone(true);
    ch.recv_in_op = false;
  }
  // Its schedule's receive is done; the rest of the plan stays (sizes of sends seen between
  // operations, a chain streaming on).
  plan_.sched.reset();
}

live::TimeNs P2pPacer::scheduled(std::uint64_t k) { return scheduledIn(plan_, k); }

void P2pPacer::opsDone() { endOp(); }

namespace {
bool sameOp(const live::CollectiveEntry& a, const live::CollectiveEntry& b) {
  return a.func == b.func && a.algo == b.algo && a.bytes == b.bytes && a.channels == b.channels &&
         a.target_channels == b.target_channels;
}
}  // namespace

void P2pPacer::finishOp() {
  // Units released past the last chain operation's: the next one's first (nextOp), or one
  // ahead of what R consumed. startChainOp counts them if this one streams on from it.
  for (auto& [ordinal, ch] : channels_)
    ch.carried =
        chain_op_ && ch.op_recv_done > plan_.shape.units ? ch.op_recv_done - plan_.shape.units : 0;
  endOp();
}

std::optional<P2pPrelude> P2pPacer::arm(const std::optional<live::CollectiveEntry>& op,
                                        std::size_t max_units, live::TimeNs issued) {
  if (!op || op->algo != model::Algo::Ring || max_units == 0) return std::nullopt;
  const int connected = connectedChannels();
  const RingOpShape shape = ringOpShape(op, nranks_, connected);
  if (!shape.symmetric || shape.units == 0) return std::nullopt;
  // NCCL runs an operation on its first channels: those of `op` (all connected if unknown).
  const auto runs = [connected](int channels, int ordinal) {
    return ordinal < (channels > 0 ? channels : connected);
  };
  // A running operation's end is known where it is a ring schedule.
  const bool running = in_op_;
  if (running && (!plan_.shape.symmetric || tree_op_ || chain_op_)) return std::nullopt;
  const auto steps = static_cast<std::uint64_t>(std::max(1, plan_.shape.slice_steps));
  P2pPrelude pre;
  for (auto& [ordinal, ch] : channels_) {
    ch.armed = false;
    if (ch.recv < 0 || !runs(op->channels, ordinal)) continue;
    const std::uint64_t head = conns_[static_cast<std::size_t>(ch.recv)].seen;
    // Running, a channel is in it once R sent there (NCCL may run it on fewer channels than
    // the log's: canArmAhead waits until all started); the others are not armed (their
    // receives start as an operation's not armed).
    if (running && (ch.op_sends == 0 || !runs(plan_.channels, ordinal))) continue;
    ch.armed = true;
    ch.armed_base = running ? ch.op_recv_base + plan_.shape.units * steps : head;
    pre.recvs.push_back({ch.recv, ch.armed_base});
  }
  if (pre.recvs.empty()) return std::nullopt;
  Plan plan = planOf(op, connected);
  pre.steps = std::max(1, plan.shape.slice_steps);
  pre.send_occupancy = plan.send_occupancy;
  pre.start = issued;
  pre.delay = op_base_ns_;
  // The schedule's first units (kept with the operation's shape: after the first of a loop,
  // at no cost).
  const std::uint64_t units = std::min<std::uint64_t>(max_units, plan.shape.units);
  for (std::uint64_t k = 0; k < units; ++k) pre.at.push_back(scheduledIn(plan, k));
  armed_plan_ = std::move(plan);
  armed_ = *op;
  armed_anchor_ = kNever;
  armed_missed_ = false;
  return pre;
}

void P2pPacer::anchored(live::TimeNs now) {
  if (armed_) {
    armed_anchor_ = std::min(armed_anchor_, now);
  } else if (in_op_ && prelude_op_) {
    op_start_ = prelude_wait_ ? now : std::min(op_start_, now);
    prelude_wait_ = false;
  }
}

void P2pPacer::anchorsMissed() {
  if (armed_) {
    armed_missed_ = true;
  } else if (in_op_ && prelude_op_ && prelude_wait_) {
    op_start_ = std::max(op_floor_, std::min(op_start_, op_first_send_));
    prelude_wait_ = false;
  }
}

bool P2pPacer::canArmAhead(live::TimeNs now) const {
  return in_op_ && plan_.shape.symmetric && !tree_op_ && !chain_op_ && !prelude_wait_ &&
         op_first_send_ != kNever && now >= op_first_send_ + kArmAheadNs;
}

live::TimeNs P2pPacer::scheduledIn(Plan& p, std::uint64_t k) {
  Schedule& s = *p.sched;
  while (s.at.size() <= k) {
    // Asked in order from 0: each unit once, the model's window never wraps under us.
    const auto a = s.ring->recvArrival(s.at.size(), 0, p.shape.unit_bytes, 0);
    s.at.push_back(a.value_or(0));
  }
  return s.at[k];
}

P2pPacer::Plan P2pPacer::planOf(const std::optional<live::CollectiveEntry>& op, int connected) {
  Plan p;
  p.shape = ringOpShape(op, nranks_, connected);
  p.channels = op && op->channels > 0 ? op->channels : 0;
  if (p.shape.symmetric) {
    // The chain every channel runs, from 0: R's idealised copy sends unit 0 at once (sizes
    // from its first send) and each member forwards a step later. It depends on the shape
    // alone, and the model's ring costs ~2 us a unit on 64 ranks (the H100's host; 17 on a
    // slow one): computed once a shape, as far as asked, for every operation of it.
    const int chans = p.channels > 0 ? p.channels : std::max(1, connected);
    const auto key = std::make_tuple(op->func, op->bytes, chans, op->target_channels);
    auto& kept = schedules_[key];
    if (!kept) {
      if (schedules_.size() > kSchedulesKept) {
        schedules_.clear();  // a program of many shapes: start over
        return planOf(op, connected);
      }
      kept = std::make_shared<Schedule>();
      kept->ring = make_(false);
      kept->ring->postRecv(0, 0, true, p.shape.slices_per_step,
                           static_cast<int>(model::Proto::Simple), chans, 1);
      (void)kept->ring->postSend(0, p.shape.unit_bytes, chans);  // the units' size
      kept->send_occupancy = kept->ring->sendOccupancy(p.shape.unit_bytes, chans);
    }
    p.sched = kept;
    p.send_occupancy = kept->send_occupancy;
  } else {
    // A chain root's sends are paced by the chain's slowest link (any channel's model).
    const auto first = channels_.begin();
    p.send_occupancy = first == channels_.end()
                           ? 0
                           : first->second.ring->sendOccupancy(p.shape.unit_bytes, p.channels);
  }
  return p;
}

std::string P2pPacer::stateLine() const {
  const char* kind = !in_op_                 ? "no operation"
                     : tree_op_              ? "tree all-reduce"
                     : chain_head_           ? "chain, R its head"
                     : chain_op_             ? "chain"
                     : plan_.shape.symmetric ? "ring schedule"
                                             : "one step at a time";
  int recvs = 0, waiting = 0;
  std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0;
  for (const Conn& c : conns_) {
    if (c.send) continue;
    ++recvs;
    if (c.released <= c.seen) ++waiting;
    lo = std::min(lo, c.seen);
    hi = std::max(hi, c.seen);
  }
  return fmt::format(
      "pacer: {} ({} units of {} B on {} channels); {} paced receives, {} with nothing released "
      "beyond what R consumed, R's receive counts {}..{}",
      kind, plan_.shape.units, plan_.shape.unit_bytes, plan_.channels, recvs, waiting,
      recvs ? lo : 0, hi);
}

void P2pPacer::opStarted(live::TimeNs now, const std::optional<live::CollectiveEntry>& op,
                         live::TimeNs issued) {
  // Armed (arm): planned then, and R's kernel may have run its prelude since.
  const bool armed = armed_ && op && sameOp(*armed_, *op);
  armed_.reset();
  // The ring schedule that ends here, if the last operation was one: where the model has it
  // end (its last unit's arrival), its shape, and its slices a channel.
  const bool last_ring = in_op_ && plan_.shape.symmetric && !tree_op_ && !chain_op_ &&
                         plan_.sched && plan_.shape.units > 0;
  const live::TimeNs last_end = last_ring ? op_start_ + scheduled(plan_.shape.units - 1) : kNoFloor;
  const std::shared_ptr<Schedule> last_sched = last_ring ? plan_.sched : nullptr;
  const std::uint64_t last_units = plan_.shape.units;
  const auto last_steps = static_cast<std::uint64_t>(sendUnitSteps());
  finishOp();
  prelude_op_ = armed;
  next_streams_ = false;
  in_op_ = true;
  // Armed: from its anchor; till one comes (or every one missed) its receives wait for the
  // kernel's.
  op_start_ = armed && armed_anchor_ != kNever ? armed_anchor_ : now;
  prelude_wait_ = armed && armed_anchor_ == kNever && !armed_missed_;
  prelude_fell_back_ = false;
  op_started_at_ = now;
  op_first_send_ = std::exchange(early_first_send_, kNever);
  // The target's ranks run an operation the model's base cost (NcclModel::opOverheadUs)
  // after the one before ended, as the model has it end, or after the program called it: R's
  // receives come no sooner. Started at R's first send instead, every ring all-gather and
  // reduce-scatter read one base cost short (-2.5 % at 1-16 MiB, H100, 2026-12-07); from R's
  // own end as the agent saw it, +1.3 to +2.9 % (R's last unit and its sight, 4-8 us).
  const live::TimeNs after = std::max(last_end, issued >= 0 ? issued : kNoFloor);
  op_floor_ = after == kNoFloor ? kNoFloor : after + op_base_ns_;
  if (armed && armed_missed_) op_start_ = std::max(op_floor_, std::min(now, op_first_send_));
  op_released_ = false;
  const int connected = connectedChannels();
  if (armed) {
    plan_ = std::exchange(armed_plan_, Plan{});
  } else {
    armed_plan_ = Plan{};  // one armed and not started
    plan_ = planOf(op, connected);
  }
  // R's kernel sent before this thread saw its stream reach the operation (its first send
  // seen before now, stamped when R made it): the schedule of a ring operation started on the
  // GPU by then, as for one seen after (observe). An older send than a start's lag can be is
  // the last operation's, past the slices counted for it (NCCL cut it into more): from there
  // a ring after a pause (a training step's compute) would be due at once. (It still counts
  // as the operation's first send for arming the next: a loaded CPU may take longer than
  // that from seeing the send to seeing the stream, and the next would never be armed.)
  const bool early_send = op_first_send_ != kNever && now - op_first_send_ <= kEarlyStartNs;
  if (!armed && plan_.shape.symmetric)
    op_start_ = std::max(op_floor_, early_send ? std::min(now, op_first_send_) : now);
  // The last ring schedule released this one's first units past its own (R's sends of this
  // one came before its stream's start, release()): where it is the same shape and R's sends
  // are recent, they count as this one's, so R's head taking them later does not move this
  // one's count (a unit past its need each, R ahead of the model).
  const bool carries = !armed && early_send && last_sched && last_sched == plan_.sched;
  const auto slice_steps = static_cast<std::uint64_t>(sendUnitSteps());
  for (auto& [ordinal, ch] : channels_) {
    const std::uint64_t last_done = ch.op_recv_done, last_base = ch.op_recv_base;
    ch.op_sends = (std::exchange(ch.early_steps, 0) + slice_steps - 1) / slice_steps;
    // Units count from R's recv head (the end of what it consumed), not from what was
    // released: a release past the last operation's need (R's sends of this operation seen
    // before its start extend the last one's receives) would put every unit of this one that
    // far ahead of R, and R ran ahead of the model (64 ranks: -26 % after all-reduces). An
    // armed one's from its head at the arm: the prelude may have released units it consumed.
    ch.op_from_arm = prelude_op_ && ch.armed;
    ch.op_recv_base = ch.recv < 0      ? 0
                      : ch.op_from_arm ? ch.armed_base
                                       : conns_[static_cast<std::size_t>(ch.recv)].seen;
    ch.op_recv_done = 0;
    if (carries && ch.recv >= 0 && last_done > last_units) {
      // From where the last one ended, which R's head may have passed (it took them).
      ch.op_recv_base = last_base + last_units * last_steps;
      ch.op_recv_done = std::min(last_done - last_units, plan_.shape.units);
    }
  }
  // R's head changes a unit of this operation or a later one can still ask for (slotFree):
  // within NCCL_STEPS of where it is now. The rest are dropped here, on every receive
  // connection (a tree's own receive is never asked and would keep them all).
  for (Conn& c : conns_) {
    if (c.send) continue;
    while (!c.heads.empty() && c.heads.front().first + kNcclSteps < c.seen) c.heads.pop_front();
  }
  if (op && op->algo == model::Algo::Tree && op->func == model::Func::AllReduce && make_tree_ &&
      plan_tree_)
    startTreeOp(now, *op, connected);
  startChainOp(now, op, issued);
}

void P2pPacer::startChainOp(live::TimeNs now, const std::optional<live::CollectiveEntry>& op,
                            live::TimeNs issued) {
  const std::optional<int> hops = chainHops(op);
  chain_op_ = hops > 0 && !channels_.empty();
  // R heads the chain (a broadcast's root, the rank after a reduce's): nothing comes to it.
  chain_head_ = hops == 0;
  chain_tail_ = hops && *hops == nranks_ - 1;
  if (!chain_op_) {
    last_chain_.reset();
    return;
  }
  const live::TimeNs last_op = chain_.op;
  // R may run it on more channels than the target (the tuner's, ring_fold.h): the target's
  // fill, R's units at the target's aggregate pace.
  live::ChainTarget target;
  if (op->target_channels > 0 && op->target_channels != plan_.channels) {
    live::CollectiveEntry t = *op;
    t.channels = op->target_channels;
    const RingOpShape shape = ringOpShape(t, nranks_, t.channels);
    target = {t.channels, shape.unit_bytes, shape.units};
  }
  chain_ = channels_.begin()->second.ring->chainTo(*hops, plan_.shape.unit_bytes, plan_.channels,
                                                   plan_.shape.units,
                                                   op->func == model::Func::Reduce, target);
  // The head sends a unit once its link and a slot of the next member are free, and starts
  // the next operation when it ended the last, a window ahead of R: back to back, the chain
  // streams on (nccl-tests' loop; docs/model.md "Broadcast and reduce back to back"), an
  // operation no sooner than its slowest member runs one. It starts no earlier than the
  // program called the operation, which R's call stands for.
  const auto key = std::make_tuple(op->func, op->root, plan_.shape.unit_bytes);
  const bool streams = last_chain_ == key;
  last_chain_ = key;
  const live::TimeNs started = issued >= 0 ? std::min(issued, now) : now;
  const auto steps = static_cast<std::uint64_t>(sendUnitSteps());
  for (auto& [ordinal, ch] : channels_) {
    ch.chain_next = live::chainFirstArrival(started, chain_.fill, streams, ch.chain_next,
                                            ch.chain_op_first, last_op);
    ch.chain_op_first = ch.chain_next;
    if (!streams || ch.carried == 0 || ch.recv < 0) continue;
    // The last operation released this one's first units (as its chain brought them): they
    // count from where the last one's ended, which R's head may have passed already (its
    // kernel found them and went on before this thread saw the stream reach the operation).
    const Conn& c = conns_[static_cast<std::size_t>(ch.recv)];
    const std::uint64_t ahead = std::min(ch.carried, plan_.shape.units);
    const std::uint64_t boundary = c.released >= ahead * steps ? c.released - ahead * steps : 0;
    ch.op_recv_base = std::min(c.seen, boundary);
    ch.op_recv_done = ahead;
    ch.chain_next += static_cast<live::TimeNs>(ahead) * chain_.pace;
  }
}

std::uint64_t P2pPacer::opSends() const {
  if (plan_.shape.symmetric) return plan_.shape.units;
  if (chain_op_ || chain_head_) return chain_tail_ ? 0 : plan_.shape.units;
  return std::numeric_limits<std::uint64_t>::max();  // not known: none counts as early
}

int P2pPacer::connectedChannels() const {
  int connected = 0;
  for (const auto& [ordinal, ch] : channels_) connected += ch.send >= 0 || ch.recv >= 0;
  return connected;
}

void P2pPacer::nextOp(const std::optional<live::CollectiveEntry>& op, live::TimeNs issued) {
  next_streams_ = false;
  next_issued_ = issued;
  if (!op || !in_op_ || !chain_op_ || !last_chain_) return;
  const std::optional<int> hops = chainHops(op);
  if (!hops || *hops <= 0) return;
  const RingOpShape next = ringOpShape(op, nranks_, connectedChannels());
  const int channels = op->channels > 0 ? op->channels : 0;
  next_streams_ = *last_chain_ == std::make_tuple(op->func, op->root, next.unit_bytes) &&
                  next.units == plan_.shape.units && channels == plan_.channels;
}

int P2pPacer::treeOf(int ordinal, std::size_t index, std::size_t count) const {
  if (tree_base_channels_ > 0) return (ordinal / tree_base_channels_) % 2;
  return index < (count + 1) / 2 ? 0 : 1;
}

void P2pPacer::startTreeOp(live::TimeNs now, const live::CollectiveEntry& op, int connected) {
  std::vector<std::pair<int, Channel*>> trees;  // (ordinal = NCCL's channel, channel)
  for (auto& [ordinal, ch] : channels_)
    if (ch.tree_send >= 0 || ch.tree_recv >= 0) trees.emplace_back(ordinal, &ch);
  if (trees.empty()) return;  // R's tree neighbours are all over the NET: the NET path times them
  tree_op_ = true;
  *tree_plan_ = plan_tree_(op, connected);
  plan_.shape = RingOpShape{};
  plan_.shape.units = tree_plan_->units;
  plan_.shape.unit_bytes =
      std::max<std::uint64_t>(1, static_cast<std::uint64_t>(tree_plan_->unit_bytes + 0.5));
  // R's sends to a virtual GPU of its node cross NVLink, shared with the other direction.
  plan_.send_occupancy = static_cast<live::TimeNs>(
      live::TreeChannel::kShare * static_cast<double>(tree_plan_->nvl.tx(tree_plan_->unit_bytes)));
  // NCCL's channels 0..n-1 run tree 0 and n..2n-1 tree 1, copied in such blocks when it adds
  // channels (treeOf). The trees differ above R's node: at a node's head, the root of one and
  // a member deep in the other (rank 0 of 64, n = 2: channels 2, 3, 6, 7, ... have a parent
  // over the NET, 0, 1, 4, 5, ... none).
  for (std::size_t j = 0; j < trees.size(); ++j) {
    Channel& ch = *trees[j].second;
    if (!ch.tree) {
      ch.tree = make_tree_(treeOf(trees[j].first, j, trees.size()),
                           [box = tree_plan_](std::uint64_t) { return *box; });
      if (ch.tree_send >= 0) {
        ch.tree->setSendsUp();
        // R's kernel writes its chunk into the pool block: it has crossed when the counter
        // moves (the NET path's posts hand it to the proxy instead).
        ch.tree->setUpSendsAreWrites();
      }
    }
    // The operation starts on every channel when R's stream reaches it (its first unit).
    ch.tree_base = ch.tree->nextUnit();
    ch.tree->postRecv(ch.tree_base, now, plan_.shape.unit_bytes, true);
    ch.up_sent = ch.down_sent = ch.child_done = 0;
    ch.child_base = ch.tree_recv >= 0 ? conns_[static_cast<std::size_t>(ch.tree_recv)].seen : 0;
  }
}

void P2pPacer::observe(int i, std::uint64_t value, live::TimeNs now) {
  if (i < 0 || i >= size()) return;
  Conn& c = conns_[static_cast<std::size_t>(i)];
  if (value <= c.seen) return;
  Channel& ch = *c.ch;
  if (tree_op_ && ch.tree) ch.tree->noteActive(now);
  if (!c.send) {  // R emptied slots: later receives may be posted
    c.seen = value;
    c.heads.emplace_back(value, now);
    // Before the operation's first release R's head can only move through what was released
    // before it (the last operation's, seen late, or released past its need): not this one's.
    if (tree_op_ && ch.tree) {
      if (c.tree_only && ch.child_done == 0) ch.child_base = std::max(ch.child_base, value);
      if (!c.tree_only && ch.op_recv_done == 0) ch.op_recv_base = std::max(ch.op_recv_base, value);
    } else if (in_op_ && !ch.op_from_arm && (plan_.shape.symmetric || chain_op_) &&
               ch.op_recv_done == 0 && !c.tree_only) {
      ch.op_recv_base = std::max(ch.op_recv_base, value);
    }
    return;
  }
  if (tree_op_ && ch.tree) {
    // A tree unit is one counter step; R's sends up drive the loop back to it.
    for (; c.seen < value; ++c.seen) {
      if (c.tree_only) {
        (void)ch.tree->postUpSend(ch.tree_base + ch.up_sent, now, plan_.shape.unit_bytes, false);
        ++ch.up_sent;
      } else {
        // Past the plan's sends down on the ring's connection: the next operation's too.
        if (ch.down_sent >= tree_plan_->units) ++ch.early_steps;
        ++ch.down_sent;
      }
    }
    return;
  }
  if (c.tree_only) {  // outside a tree all-reduce nothing is modelled on it
    c.seen = value;
    return;
  }
  // R filled slots: one unit per slice (a poll may see several at once). The agent kernel
  // credits them; an asymmetric operation's model still wants them (sizes, a root's pace).
  const auto step = static_cast<std::uint64_t>(sendUnitSteps());
  const bool symmetric = in_op_ && plan_.shape.symmetric;
  // R's kernel sent before the CPU saw its stream reach the operation (`now` is the agent
  // kernel's stamp): the operation started on the GPU by then, and the chain's schedule with
  // it, as long as no receive of it was released yet.
  if (symmetric && !prelude_op_ && !op_released_ && now < op_start_)
    op_start_ = std::max(op_floor_, now);
  while (c.seen < value) {
    const std::uint64_t end = std::min(value, c.seen + step);
    if (!symmetric) (void)ch.ring->postSend(now, plan_.shape.unit_bytes, plan_.channels);
    if (ch.net_ring) (void)ch.net_ring->postSend(now, plan_.shape.unit_bytes, plan_.channels);
    // Between operations, or past this one's sends (which still let a ring's receives
    // follow, release()): the next operation's too.
    if (!in_op_ || ch.op_sends >= opSends()) {
      ch.early_steps += end - c.seen;
      early_first_send_ = std::min(early_first_send_, now);
    } else {
      op_first_send_ = std::min(op_first_send_, now);
    }
    ++ch.op_sends;
    c.seen = end;
  }
}

std::optional<live::TimeNs> P2pPacer::slotFree(Conn& c, std::uint64_t end, live::TimeNs floor) {
  // R may receive into the slot of a unit ending at `end` once its head is within NCCL_STEPS.
  const std::uint64_t need = end > kNcclSteps ? end - kNcclSteps : 0;
  while (!c.heads.empty() && c.heads.front().first < need) c.heads.pop_front();
  // The first head change that reached it (heads are kept from before the operation's
  // start, see opStarted), or none remembered: free from before them all.
  if (!c.heads.empty()) return std::max(floor, c.heads.front().second);
  if (c.seen >= need) return floor;
  return std::nullopt;
}

live::TimeNs P2pPacer::release(live::TimeNs now, std::vector<P2pRelease>& out) {
  live::TimeNs next = kNever;
  for (std::size_t i = 0; i < conns_.size(); ++i) {
    Conn& c = conns_[i];
    if (c.send || !in_op_) continue;
    std::uint64_t value = c.released;
    live::TimeNs due = 0;
    if (tree_op_ && c.ch->tree) {
      // A ring receive that is not the tree's parent's stays idle in a tree all-reduce.
      if (!c.tree_only && !c.tree_parent) continue;
      next = std::min(next, releaseTree(c, *c.ch, now, value, due));
    } else if (chain_op_ && !c.tree_only) {
      next = std::min(next, releaseChain(c, *c.ch, now, value, due));
    } else if (chain_head_ && !c.tree_only) {
      continue;
    } else if (c.tree_only) {
      // Not expected to move: one step ahead of what R consumed, so nothing waits on it.
      if (value <= c.seen) {
        value = c.seen + 1;
        due = now;
      }
    } else {
      Channel& ch = *c.ch;
      for (;;) {
        std::uint64_t end = 0;
        if (plan_.shape.symmetric && prelude_wait_) {
          // Armed: the kernel starts it; this waits for its anchor, or gives up on it a while
          // after the operation started (the anchors did not come: R's head never reached a
          // base, a count not as estimated). Then every channel of it runs (R's first sends
          // may have been counted for the operation before) from its first send, or its start.
          const live::TimeNs since = std::min(op_first_send_, op_started_at_);
          if (now < since + kAnchorWaitNs) {
            next = std::min(next, since + kAnchorWaitNs);
            break;
          }
          op_start_ = std::max(op_floor_, std::min(op_start_, since));
          prelude_wait_ = false;
          prelude_fell_back_ = true;
        }
        if (plan_.shape.symmetric) {
          // Open loop once R's kernel is in the operation on this channel (its first send:
          // NCCL leaves channels without work idle), up to the operation's slices; past
          // that count (a partition NCCL cut differently) only as far as R's own sends.
          // A channel whose send R makes over the NET (none paced here) runs at once.
          const std::uint64_t sent =
              ch.send >= 0 && !prelude_fell_back_ ? ch.op_sends : plan_.shape.units;
          // Past the slices, as far as R's sends, armed next or not: the counts the CPU gives
          // each operation are its view of R's (a send seen before the stream's start counts
          // for the one before), and only this keeps a channel whose count came short going
          // (the H100's world, armed: one channel of 16 a unit short, 10 s, 2026-12-06).
          const std::uint64_t limit = std::max(plan_.shape.units, sent);
          if (sent == 0 || ch.op_recv_done >= limit) break;
          end = ch.op_recv_base +
                (ch.op_recv_done + 1) * static_cast<std::uint64_t>(sendUnitSteps());
        } else {
          // One step ahead of what R consumed, at most.
          if (value > c.seen) break;
          end = value + 1;
        }
        live::TimeNs arrival = 0;
        if (plan_.shape.symmetric) {
          // The kernel holds it until R's slot is free (p2p_agent_rules.h).
          arrival = op_start_ + scheduled(ch.op_recv_done);
        } else {
          const auto posted = slotFree(c, end, op_start_);
          if (!posted) break;
          const std::uint64_t unit = ch.recv_units;
          ch.ring->postRecv(unit, *posted, !ch.recv_in_op, plan_.shape.slices_per_step,
                            static_cast<int>(model::Proto::Simple), plan_.channels,
                            ch.recv_in_op ? 0 : 1);
          ch.recv_in_op = true;
          const auto a = ch.ring->recvArrival(unit, *posted, plan_.shape.unit_bytes, now);
          if (!a) {  // the model waits for R's send to size it: look again soon
            next = std::min(next, now + 1000);
            break;
          }
          arrival = *a;
        }
        if (arrival > now) {
          next = std::min(next, arrival);
          break;
        }
        value = std::max(value, end);
        due = arrival;
        op_released_ = true;
        if (!plan_.shape.symmetric) ++ch.recv_units;
        ++ch.op_recv_done;
      }
    }
    if (value != c.released) {
      c.released = value;
      out.push_back({static_cast<int>(i), value, due});
    }
  }
  return next;
}

live::TimeNs P2pPacer::releaseChain(Conn& c, Channel& ch, live::TimeNs now, std::uint64_t& value,
                                    live::TimeNs& due) {
  const auto steps = static_cast<std::uint64_t>(sendUnitSteps());
  for (;;) {
    // Open loop within the operation's units (the kernel holds a unit until R's slot is
    // free). Past them, the next operation's where it streams on from this one (nextOp), up
    // to an operation's; else one ahead of what R consumed (NCCL cut this one into more, or
    // the next one is not known yet).
    const bool past = ch.op_recv_done >= plan_.shape.units;
    const std::uint64_t next_unit = past ? ch.op_recv_done - plan_.shape.units : 0;
    const bool next_op = past && next_streams_ && next_unit < plan_.shape.units;
    if (past && !next_op && value > c.seen) return kNever;
    const std::uint64_t end = ch.op_recv_base + (ch.op_recv_done + 1) * steps;
    // No floor at the operation's start: back to back the member before R writes the next
    // operation's units into R's free slots while R's kernel is still on the last one, as a
    // target's sender runs ahead by NCCL's slots (the start plus the last hop's way held the
    // reduce root, whose last hop is the NET's, ~13 us an operation on the GPU).
    const auto free = slotFree(c, end, /*floor=*/0);
    if (!free) return kNever;  // R's slot: the next pass after R's head moved
    // The member before R writes the unit into R's slot once the chain brought it there and
    // the slot is free (a slow R: the chain had it waiting).
    live::TimeNs arrival = std::max(ch.chain_next, *free + chain_.last_hop);
    // Past the operation's units the unit is the next operation's, which comes no sooner
    // than the streaming rule lets it (chainFirstArrival, as startChainOp will have it): not
    // at this one's pace right after its last.
    if (next_op) {
      const live::TimeNs first =
          live::chainFirstArrival(next_issued_ >= 0 ? next_issued_ : op_start_, chain_.fill, true,
                                  ch.chain_next, ch.chain_op_first, chain_.op);
      arrival = std::max(arrival, first + static_cast<live::TimeNs>(next_unit) * chain_.pace);
    } else if (past) {
      arrival = std::max(arrival, ch.chain_op_first + chain_.op);
    }
    if (arrival > now) return arrival;
    ++ch.op_recv_done;
    value = std::max(value, end);
    due = arrival;
    op_released_ = true;
    if (!past) ch.chain_next += chain_.pace;
  }
}

live::TimeNs P2pPacer::releaseTree(Conn& c, Channel& ch, live::TimeNs now, std::uint64_t& value,
                                   live::TimeNs& due) {
  const bool child = c.tree_only;  // the receive from rank + 1; else from rank - 1
  std::uint64_t& done = child ? ch.child_done : ch.op_recv_done;
  const std::uint64_t base = child ? ch.child_base : ch.op_recv_base;
  const live::TreeRole role = child ? live::TreeRole::FromChild : live::TreeRole::FromParent;
  for (;;) {
    // Open loop within the plan (the kernel holds a unit until R's slot is free); past it
    // only as far as R's own sends (NCCL cut the operation into more units than planned).
    if (done >= std::max({tree_plan_->units, ch.up_sent, ch.down_sent})) return kNever;
    const auto a = ch.tree->recvArrival(role, ch.tree_base + done, op_start_, now);
    if (!a) return now + 1000;  // it comes down after R's send up of the unit: look again soon
    if (*a > now) return *a;
    ++done;
    value = std::max(value, base + done);
    due = *a;
  }
}

}  // namespace crystal::plugin
