#include "virtual_comm.h"

#include <algorithm>
#include <string>

#include <fmt/core.h>

#include "crystal/base/log.h"
#include "errors.h"
#include "gpu_writer.h"
#include "params.h"
#include "state.h"

namespace crystal::plugin {
namespace {

std::shared_ptr<MirrorChannel> onlyForMirror(std::shared_ptr<MirrorChannel> m) {
  return PluginState::get().dataPolicy() == DataPolicy::Mirror ? std::move(m) : nullptr;
}

// Places a connection's next request (NCCL posts in operation order): whether it belongs to
// a ring operation, per the operations NCCL's profiler announced for the connection (none
// announced: the ring's, as every request of a ring connection was before), whether that is
// the connection's own algorithm (a tree connection's own are the others: a ring operation
// on it is one that reused it), and its unit number among the requests of its kind.
void placeRequest(OpSegments* ops, bool tree_link, std::uint64_t (&count)[2], Request& r,
                  std::optional<OpSegments::Place>& place) {
  place = ops ? ops->next() : std::nullopt;
  r.ring_op = !place || place->ring;
  r.own_op = tree_link ? !(place && place->ring) : r.ring_op;
  r.unit = count[r.own_op ? 0 : 1]++;
}

// Transfers per ring step of an all-gather: NCCL 2.28.9 runs Simple rings with
// ALLGATHER_CHUNKSTEPS / ALLGATHER_SLICESTEPS = 4 / 2 slices per step; LL and LL128 with 1.
std::uint32_t allGatherSlicesPerStep(proto::Proto p) { return p == proto::Proto::Simple ? 2 : 1; }

// The transfers of one loop of a ring all-gather (its ring steps x slices per step).
std::uint32_t allGatherLoop(const OpSegments::Place& place, proto::Proto p) {
  return static_cast<std::uint32_t>(place.allgather_steps) * allGatherSlicesPerStep(p);
}

// Whether a ring all-gather's send is one of its loop's first step: the real rank's own
// contribution, which every later step of the loop carries in mirror (a virtual rank
// contributes what the real rank did), so it is kept for all of them.
bool allGatherSource(const OpSegments::Place& place, proto::Proto p) {
  return place.allgather_steps > 0 &&
         place.index % allGatherLoop(place, p) < allGatherSlicesPerStep(p);
}

// The mirror key (Request::mirror_k): (operation, index in it) when the operation was
// announced, so that other operations' sends on a ring connection shift nothing; else the
// ring unit number. A ring all-gather's receive takes the key of its loop's source send (the
// same slice of the first step): every step of a loop carries one rank's contribution, in
// mirror a copy of the real rank's, so no receive waits for the real rank to forward it.
// False: not a ring operation's (nothing to pair).
bool mirrorKey(const std::optional<OpSegments::Place>& place, Request& r, proto::Proto p,
               bool receive) {
  r.mirrored = r.ring_op;
  if (!r.mirrored) return false;
  if (!place) {
    r.mirror_k = r.unit;
    return true;
  }
  std::uint32_t index = place->index;
  if (receive && place->allgather_steps > 0) {
    const std::uint32_t loop = allGatherLoop(*place, p);
    index = index / loop * loop + index % allGatherSlicesPerStep(p);
    r.mirror_source = true;
  }
  r.mirror_k = (place->op << 24) | index;
  return true;
}

// At close: how a ring connection's requests were placed (a check that NCCL's profiler
// events reached it: "not announced" should stay 0 in an emulation).
void logPlacement(const char* dir, int peer, const OpSegments* ops,
                  const std::uint64_t (&count)[2]) {
  if (!ops || count[0] + count[1] == 0) return;
  CRYSTAL_INFO("ring connection {} virtual rank {}: {} requests of ring operations, {} of other "
               "operations, {} not announced by NCCL's profiler",
               dir, peer, count[0], count[1], ops->unplaced());
}

// NCCL registers a connection's protocol buffers before its first data call.
int protocolBuffers(const DataComm& c) { return std::min(3, c.registrations()); }

}  // namespace

VirtualSendComm::VirtualSendComm(NetContext* ctx, int dev, int max_requests,
                                 std::shared_ptr<live::VirtualLink> link, int peer_rank,
                                 std::shared_ptr<MirrorChannel> mirror,
                                 std::shared_ptr<OpSegments> ops)
    : DataComm(CommKind::Send, ctx, dev, max_requests), link_(std::move(link)),
      peer_rank_(peer_rank), mirror_(onlyForMirror(std::move(mirror))), ops_(std::move(ops)) {
  if (mirror_) mirror_->attachSender();
}

VirtualSendComm::~VirtualSendComm() {
  try {
    logPlacement("to", peer_rank_, ops_.get(), counts_);
  } catch (...) {  // a log line is not worth an exception out of a destructor
  }
}

void VirtualSendComm::isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) {
  r.n = 1;
  r.data[0] = data;
  r.sizes[0] = size;
  r.tags[0] = tag;
  r.posted = now;
  r.bytes = size;
  r.step = next_send_++;
  std::optional<OpSegments::Place> place;
  placeRequest(ops_.get(), link_->treeTimed(), counts_, r, place);
  r.due = link_->postSend(now, size, outstanding() == 1, r.own_op, place ? place->channels : 0);
  if (!mirror_) return;
  mirror_->noteSendPost(now);
  if (!r.ring_op) return;
  if (protocol_buffers_ < 0) protocol_buffers_ = protocolBuffers(*this);
  // An empty send (the second slice of a small chunk) may point anywhere: nothing to read.
  const MemRegion* region = regionOf(data);
  const proto::Proto p =
      region ? protoOfRegion(region->ordinal, protocol_buffers_) : proto::Proto::Simple;
  (void)mirrorKey(place, r, p, /*receive=*/false);
  // A collective whose result the interposer rewrites: no receive reads what this carried.
  if (place && place->bytes_free) {
    r.mirrored = false;
    return;
  }
  // A ring all-gather's receives mirror only its loops' first-step sends: the others (the
  // real rank forwarding what it got) have no receive to serve, and keeping a copy of each
  // when it completes would cost the proxy a memcpy per step (1 MiB slices: 100s of us).
  const bool source = place && allGatherSource(*place, p);
  if (place && place->allgather_steps > 0 && !source) {
    r.mirrored = false;
    return;
  }
  // A GPU buffer (GDR send) is read by the paired receive's GPU copy, never by the CPU.
  const bool on_device = region && region->type == nccl::NCCL_PTR_CUDA;
  mirror_->sendPosted(r.mirror_k, p, region ? data : nullptr, size, on_device, source);
}

void VirtualSendComm::warnIfStalled(const Request& r, live::TimeNs now) {
  if (stall_ns_ <= 0 || stall_warned_ || now - r.posted < stall_ns_) return;
  stall_warned_ = true;  // once per comm: the log must stay readable in a long stall
  CRYSTAL_WARN("send to virtual rank {} (net dev {}): request {} ({} bytes, {} operation) has "
               "waited {:.1f} s; {}; still waiting",
               peer_rank_, dev(), r.step, r.bytes, r.ring_op ? "ring" : "another",
               static_cast<double>(now - r.posted) / 1e9,
               now < r.due ? fmt::format("its modelled completion is {:.1f} s ahead",
                                         static_cast<double>(r.due - now) / 1e9)
                           : std::string("a GPU copy of the mirrored bytes has not finished"));
}

bool VirtualSendComm::test(Request& r, live::TimeNs now, int* sizes) {
  if (now < r.due) {
    warnIfStalled(r, now);
    return false;
  }
  if (mirror_) {
    // NCCL may rewrite the buffer once we say done: not while a GPU copy still reads it.
    if (r.mirrored && !mirror_->sendDone(r.mirror_k)) {
      warnIfStalled(r, now);
      return false;
    }
  }
  if (sizes) sizes[0] = static_cast<int>(r.sizes[0]);
  return true;
}

VirtualRecvComm::VirtualRecvComm(NetContext* ctx, int dev, int max_requests,
                                 std::shared_ptr<live::VirtualLink> link, int peer_rank,
                                 std::shared_ptr<MirrorChannel> mirror,
                                 std::shared_ptr<OpSegments> ops)
    : DataComm(CommKind::Recv, ctx, dev, max_requests), link_(std::move(link)),
      peer_rank_(peer_rank), policy_(PluginState::get().dataPolicy()),
      mirror_(onlyForMirror(std::move(mirror))), ops_(std::move(ops)),
      deliveries_(static_cast<std::size_t>(max_requests)) {
  wait_lines_ = paramBool("CRYSTAL_LINES_WAIT");
  use_writer_ = policy_ == DataPolicy::None && !wait_lines_ && paramBool("CRYSTAL_GPU_WRITER");
  if (mirror_) mirror_->attachReceiver();
}

VirtualRecvComm::~VirtualRecvComm() {
  try {
    logPlacement("from", peer_rank_, ops_.get(), counts_);
    logMirrorCounts();
  } catch (...) {
  }
}

void VirtualRecvComm::logMirrorCounts() const {
  const std::uint64_t not_sent = written(DataWritten::NotSent),
                      other_proto = written(DataWritten::OtherProto),
                      not_kept = written(DataWritten::NotKept),
                      unpaired = written(DataWritten::Unpaired);
  const std::uint64_t zeros = not_sent + other_proto + not_kept + unpaired;
  const std::uint64_t mirrored = written(DataWritten::Mirrored);
  const std::uint64_t rewritten = written(DataWritten::Rewritten);
  if (policy_ != DataPolicy::Mirror || mirrored + zeros + rewritten == 0) return;
  CRYSTAL_INFO("mirror from virtual rank {}: {} receives carried the real rank's send, {} got "
               "zeros ({} before their send was posted, {} of another protocol, {} whose send "
               "was not kept, {} without a paired send), {} were of collectives whose results "
               "the interposer writes (flags only); {} mirror holds ran out",
               peer_rank_, mirrored, zeros, not_sent, other_proto, not_kept, unpaired,
               rewritten, holds_ran_out_);
}

void VirtualRecvComm::irecv(Request& r, int n, void** data, const std::size_t* sizes,
                            const int* tags, live::TimeNs now) {
  r.n = n;
  for (int i = 0; i < n; ++i) {
    r.data[i] = data[i];
    r.sizes[i] = sizes[i];
    r.tags[i] = tags ? tags[i] : 0;
    r.bytes += sizes[i];
  }
  r.posted = now;
  planDelivery(r);
  r.step = next_step_++;
  std::optional<OpSegments::Place> place;
  placeRequest(ops_.get(), link_->treeTimed(), counts_, r, place);
  if (mirror_)
    (void)mirrorKey(place, r, deliveries_[static_cast<std::size_t>(slotOf(r))].proto,
                    /*receive=*/true);
  // A tree connection without placement (not its ring neighbour's) runs only all-reduces.
  if ((place && place->bytes_free) ||
      (!place && tree_of_ != 0 && policy_ == DataPolicy::Mirror &&
       PluginState::get().resultsRewritten(tree_of_)))
    freeBytes(r);
  // Only this one outstanding: an operation starts. LL/LL128 move one step per request, over
  // their own hops (the target's LL NET hop is a few us, Simple's 14).
  const proto::Proto p = deliveries_[static_cast<std::size_t>(slotOf(r))].proto;
  const bool one_per_step = p != proto::Proto::Simple;
  link_->postRecv(
      r.unit, now, outstanding() == 1, one_per_step ? 1 : 0, r.own_op,
      static_cast<int>(p),  // NCCL_PROTO_* order, as model::Proto
      place ? place->channels : 0, place ? (place->index == 0 ? 1 : 0) : -1,
      place ? live::ChainRecv{place->chain_hops, place->chain_unit_bytes, place->chain_issued_ns,
                              place->transfers, place->chain_reduce}
            : live::ChainRecv{});
  // Known now if the paired sender already reached this step; else resolved in test().
  r.due = link_->recvArrival(r.unit, now, r.bytes, now, r.own_op).value_or(Request::kUnknown);
  // Already arrived (an open-loop ring's virtual side runs ahead of the real rank): written
  // now, as a NIC writes into a posted buffer. The GPU polls LL/LL128 flags itself, so it
  // then need not wait for the proxy to get round to testing this request (NCCL tests a
  // connection's receives one at a time, in order).
  // Not under mirror while the mirrored send is still to come: test() decides then (it holds,
  // or, once holds stopped paying off, gets mirroring back when the send came first).
  const bool mirror_wait = mirror_ && r.mirrored && mirror_->hasSender() &&
                           !mirror_->sent(r.mirror_k);
  if (r.due <= now && !mirror_wait) (void)deliver(r, now);
}

void VirtualRecvComm::planDelivery(Request& r) {
  Delivery& d = deliveries_[static_cast<std::size_t>(slotOf(r))];
  d = Delivery{};
  if (protocol_buffers_ < 0) protocol_buffers_ = protocolBuffers(*this);
  // Grouped receives only happen for p2p (shared Simple pool): nothing to write.
  if (r.n != 1 || r.sizes[0] == 0) return;
  const MemRegion* region = regionOf(r.data[0]);
  if (!region) return;
  d.proto = protoOfRegion(region->ordinal, protocol_buffers_);
  const bool slotted = region->ordinal < protocol_buffers_ &&
                       (protocol_buffers_ == 3 || d.proto == proto::Proto::LL);
  if (slotted) {
    // All protocol buffers of a connection share its step counter.
    const std::size_t step_bytes = region->size / proto::kSteps;
    const auto off = static_cast<std::size_t>(static_cast<const char*>(r.data[0]) -
                                              static_cast<const char*>(region->base));
    const int slot = step_bytes ? static_cast<int>(off / step_bytes) : -1;
    const auto step = steps_.next(slot);
    if (!step)
      throw PluginError(Errc::BadArgument,
                        fmt::format("irecv from virtual rank {}: buffer offset {} is outside "
                                    "the {} step slots of its region",
                                    peer_rank_, off, proto::kSteps));
    d.conn_step = *step;
    r.conn_step = static_cast<std::int64_t>(*step);
    if (region->ordinal < 3) {
      d.buffer_slot = region->ordinal * proto::kSteps + slot;
      if (region->type != nccl::NCCL_PTR_CUDA) d.placed = d.buffer_slot;
    }
  }
  d.device = region->type == nccl::NCCL_PTR_CUDA;
  if (d.proto == proto::Proto::Simple) {
    if (d.device && policy_ == DataPolicy::Zero) {
      // NCCL's GPU buffers are not zeroed (cuMem allocations): zero the slot now, while the
      // modelled transfer runs, so completion at its time waits for nothing in practice.
      gpu().zero(r.data[0], r.sizes[0]);
      gpu().mark(slotOf(r));
      d.gpu_pending = true;
    }
    d.write = policy_ == DataPolicy::Mirror;
    return;
  }
  if (reinterpret_cast<std::uintptr_t>(r.data[0]) % 8 != 0)
    throw PluginError(Errc::BadArgument,
                      fmt::format("irecv from virtual rank {}: LL/LL128 buffer {} is not "
                                  "8-byte aligned",
                                  peer_rank_, r.data[0]));
  d.write = true;
}

void VirtualRecvComm::registered(const MemRegion& region) {
  if (!use_writer_ || writer_ || region.type != nccl::NCCL_PTR_CUDA) return;
  std::string why;  // forCurrentContext logs it
  try {
    writer_ = GpuWriter::forCurrentContext(&why);
  } catch (const std::exception& e) {  // the writer is an optimisation: never fail NCCL for it
    CRYSTAL_INFO("GPU writer not used: {}", e.what());
  }
  use_writer_ = writer_ != nullptr;
}

DeviceQueue& VirtualRecvComm::gpu() {
  if (gpu_) return *gpu_;
  gpu_ = std::make_unique<DeviceQueue>(static_cast<int>(deliveries_.size()));
  if (writer_) gpu_->setGpuWriter(writer_);
  return *gpu_;
}

void VirtualRecvComm::freeBytes(Request& r) {
  Delivery& d = deliveries_[static_cast<std::size_t>(slotOf(r))];
  r.mirrored = false;
  d.bytes_free = true;
  if (d.proto == proto::Proto::Simple) d.write = false;  // nothing to write, nothing to wait for
  r.written = static_cast<char>(DataWritten::Rewritten);
  ++written_[static_cast<unsigned char>(DataWritten::Rewritten)];
}

bool VirtualRecvComm::holdForMirror(Request& r, live::TimeNs now) {
  if (!mirror_ || !r.mirrored || !mirror_->hasSender()) return false;
  if (mirror_->sent(r.mirror_k)) {
    mirror_no_wait_ = false;  // the send came first: holding is worth it again
    return false;
  }
  const std::uint64_t op = r.mirror_k >> 24;
  if (mirror_no_wait_ && op != no_wait_op_) mirror_no_wait_ = false;  // a new operation
  if (mirror_no_wait_) return false;
  // Hold while the real rank is still sending: in a reduce-scatter its send k follows
  // receive k-2 by a GPU turnaround, however far the (open-loop) virtual side ran ahead of
  // it. Give up once no send came for the wait since this receive was posted, due and first
  // tested (NCCL's proxy may come late to it while busy with its other connections).
  const live::TimeNs since =
      std::max({r.posted, std::min(r.due, now), r.first_test, mirror_->lastSendPost()});
  if (now < since + mirrorWait(r)) return true;
  mirror_no_wait_ = true;  // the real rank's send waits for this receive (broadcast, ...)
  no_wait_op_ = op;
  r.hold_ran_out = true;
  return false;
}

void VirtualRecvComm::forgetPlaced(const void* p, std::size_t bytes, int keep) {
  const auto* lo = static_cast<const char*>(p);
  const char* hi = lo + bytes;
  for (std::size_t i = 0; i < placed_.size(); ++i) {
    if (static_cast<int>(i) == keep || placed_[i].k == UINT64_MAX) continue;
    const auto* a = static_cast<const char*>(placed_[i].at);
    if (a < hi && lo < a + placed_[i].n) placed_[i] = {};
  }
}

void VirtualRecvComm::warnIfStalled(const Request& r, live::TimeNs now, const char* what) {
  if (stall_ns_ <= 0 || stall_warned_ || now - r.posted < stall_ns_) return;
  stall_warned_ = true;  // once per comm: the log must stay readable in a long stall
  CRYSTAL_WARN("receive from virtual rank {} (net dev {}): request {} (unit {} of {} "
               "operations, {} bytes posted) has waited {:.1f} s for {}{}; still waiting",
               peer_rank_, dev(), r.step, r.unit, r.ring_op ? "ring" : "other", r.bytes,
               static_cast<double>(now - r.posted) / 1e9, what,
               r.due == Request::kUnknown
                   ? std::string()
                   : fmt::format(" (modelled arrival {:+.3f} s from now)",
                                 static_cast<double>(r.due - now) / 1e9));
}

bool VirtualRecvComm::deliver(Request& r, live::TimeNs now) {
  const int slot = slotOf(r);
  Delivery& d = deliveries_[static_cast<std::size_t>(slot)];
  if (!d.write) return true;
  if (holdForMirror(r, now)) return false;
  // The virtual sender filled every posted buffer completely: write what it delivered.
  MirrorChannel* mirror = r.mirrored ? mirror_.get() : nullptr;
  // LL/LL128 lines of a collective the interposer rewrites: flags only, as under none.
  const DataPolicy policy = d.bytes_free ? DataPolicy::None : policy_;
  DataWritten w;
  if (d.device) {
    HighZero* hz = d.proto == proto::Proto::LL128 && d.buffer_slot >= 0
                       ? &ll128_high_zero_[static_cast<std::size_t>(d.buffer_slot)]
                       : nullptr;
    const bool high_zero = hz && hz->at == r.data[0] && r.sizes[0] <= hz->bytes;
    w = deliverVirtualDataOnDevice(policy, mirror, r.mirror_k, d.proto, r.data[0], r.sizes[0],
                                   d.conn_step, gpu(), slot, high_zero);
    // Every LL128 write leaves the flags' high halves equal to this step's flag's.
    if (hz) {
      if (proto::ll128Flag(d.conn_step) >> 32 != 0)
        *hz = {};
      else if (!high_zero)
        *hz = {r.data[0], r.sizes[0]};
    }
    if (waitsForGpu(d)) {
      gpu().mark(slot);
      d.gpu_pending = true;
    }
  } else {
    // Other slots whose bytes this write may cover no longer hold what they did.
    MirrorChannel::Placed* placed = d.placed >= 0 ? &placed_[static_cast<std::size_t>(d.placed)]
                                                  : nullptr;
    if (policy_ == DataPolicy::Mirror) forgetPlaced(r.data[0], r.sizes[0], d.placed);
    w = deliverVirtualData(policy, mirror, r.mirror_k, d.proto, r.data[0], r.sizes[0],
                           d.conn_step, placed);
    if (placed && w != DataWritten::Mirrored) *placed = {};
  }
  if (d.bytes_free) w = DataWritten::Rewritten;  // counted in freeBytes
  else ++written_[static_cast<unsigned char>(w)];
  r.written = static_cast<char>(w);
  if (r.hold_ran_out) ++holds_ran_out_;
  d.write = false;
  return true;
}

bool VirtualRecvComm::test(Request& r, live::TimeNs now, int* sizes) {
  if (!link_->hostAlive(now))
    throw PluginError(Errc::Remote,
                      fmt::format("receive from virtual rank {}: the emulation host closed its "
                                  "stream (host gone); this communicator cannot continue",
                                  peer_rank_));
  if (r.due == Request::kUnknown) {
    auto due = link_->recvArrival(r.unit, r.posted, r.bytes, now, r.own_op);
    if (!due) {
      warnIfStalled(r, now, link_->isRing()   ? "its ring's virtual members to reach it"
                            : link_->isTree() ? "its tree's virtual members to reach it"
                                              : "its arrival time");
      return false;
    }
    r.due = *due;
  }
  if (now < r.due) {
    warnIfStalled(r, now, "its modelled arrival");
    return false;
  }
  if (!deliver(r, now)) {
    warnIfStalled(r, now, "the real rank's send it mirrors");
    return false;
  }
  const int slot = slotOf(r);
  Delivery& d = deliveries_[static_cast<std::size_t>(slot)];
  // GPU writes: the receive is done once they are (an event query, never a wait).
  if (d.gpu_pending) {
    if (!gpu_->done(slot)) {
      warnIfStalled(r, now, "its GPU writes (the plugin's stream has not run them)");
      return false;
    }
    d.gpu_pending = false;
  }
  link_->recvDone(outstanding() == 1, r.own_op);  // the last outstanding: the operation ended
  if (sizes)
    for (int i = 0; i < r.n; ++i) sizes[i] = static_cast<int>(r.sizes[i]);
  return true;
}

}  // namespace crystal::plugin
