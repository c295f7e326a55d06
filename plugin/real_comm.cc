#include "real_comm.h"

#include <fmt/core.h>
#include <sys/random.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "crystal/base/log.h"
#include "errors.h"
#include "fd_passing.h"
#include "params.h"
#include "proto_lines.h"
#include "virtual_data.h"

namespace crystal::plugin {

namespace {
// A connection's stream: its shared-memory page where it has one, else its socket.
std::size_t writeStream(ShmStream* s, int fd, const void* p, std::size_t n) {
  return s ? s->write(fd, p, n) : sendSome(fd, p, n);
}
std::size_t readStream(ShmStream* s, int fd, void* p, std::size_t n) {
  return s ? s->read(fd, p, n) : recvSome(fd, p, n);
}
}  // namespace

void RealSendComm::registered(const MemRegion& region) {
  if (region.type != nccl::NCCL_PTR_CUDA || region.size == 0) return;
  if (!gpu_) gpu_ = std::make_unique<DeviceQueue>(static_cast<int>(capacity()));
  const auto k = static_cast<std::uint32_t>(segments_.size());
  Segment seg;
  // Host buffers stay on TCP: a memcpy into a segment and one out of it cost what TCP's two
  // copies do (bench/plugin/real_pair_bench.cc); GPU buffers skip TCP's copies altogether.
  if (offer_shm_) {
    std::string why;
    auto shm = ShmSegment::create(region.size, &why);
    if (shm && !gpu_->adoptTwin(region.base, region.size, shm->data(), &why)) shm.reset();
    if (shm) {
      FrameHeader h;
      h.kind = FrameKind::ShmOffer;
      h.size = shm->size();
      h.segment = k;
      ShmOfferBody body;
      std::snprintf(body.name, sizeof body.name, "%s", shm->name().c_str());
      control_.append(reinterpret_cast<const char*>(&h), sizeof h);
      control_.append(reinterpret_cast<const char*>(&body), sizeof body);
      seg.shm = std::move(shm);
      seg.state = Segment::State::Offered;
    } else {
      CRYSTAL_INFO("send to {}: no shared memory for a {}-byte buffer ({}); its bytes go over TCP",
                   peer_, region.size, why);
    }
  }
  if (!seg.shm) (void)gpu_->twin(region.base, region.size);
  if (offer_ipc_) offerAllocation(region, seg, k);
  if (seg.state != Segment::State::None || seg.ipc != Segment::State::None)
    segments_.push_back(std::move(seg));
}

void RealSendComm::offerAllocation(const MemRegion& region, Segment& seg, std::uint32_t k) {
  const auto* base = static_cast<const std::byte*>(region.base);
  for (const Segment& s : segments_)  // one offer an allocation (NCCL puts LL128 and Simple in one)
    if (s.ipc != Segment::State::Refused && base >= s.alloc_base &&
        base < s.alloc_base + s.alloc_size)
      return;
  DeviceQueue::Exported ex;
  std::string why;
  if (!gpu_->exportAllocation(region.base, &ex, &why)) {
    CRYSTAL_INFO(
        "send to {}: cannot export the allocation of a {}-byte GPU buffer ({}); no GPU "
        "to GPU copies from it",
        peer_, region.size, why);
    return;
  }
  // Random per comm, so notes of this process's comms in one inbox stay apart (a failed
  // getrandom leaves 0: keys are then the segment numbers, still unique within this comm).
  if (ipc_key_base_ == 0) (void)::getrandom(&ipc_key_base_, sizeof ipc_key_base_, 0);
  seg.ipc_fd = Fd(ex.fd);
  seg.alloc_base = base - ex.offset;
  seg.alloc_size = ex.size;
  seg.ipc = Segment::State::Offered;
  FrameHeader h;
  h.kind = FrameKind::IpcOffer;
  h.size = ex.size;
  h.offset = ex.offset;
  h.segment = k;
  IpcOfferBody body;
  body.key = ipc_key_base_ + k;
  body.region_size = region.size;
  control_.append(reinterpret_cast<const char*>(&h), sizeof h);
  control_.append(reinterpret_cast<const char*>(&body), sizeof body);
}

// Fds the receiver asked for (IpcWant) go to its inbox; IpcFd on the stream says which did.
void RealSendComm::sendIpcFds() {
  for (std::size_t k = 0; k < segments_.size(); ++k) {
    Segment& seg = segments_[k];
    if (seg.ipc != Segment::State::Offered || seg.ipc_token == 0 || seg.ipc_fd_sent) continue;
    std::string why;
    const FdSend sent = sendFd(seg.ipc_token, ipc_key_base_ + k, seg.ipc_fd.get(), &why);
    if (sent == FdSend::Again) return;  // its inbox is full: next progress
    FrameHeader h;
    h.kind = FrameKind::IpcFd;
    h.segment = static_cast<std::uint32_t>(k);
    h.size = sent == FdSend::Sent ? 1 : 0;
    control_.append(reinterpret_cast<const char*>(&h), sizeof h);
    seg.ipc_fd = Fd{};  // the receiver holds its own copy now (or never will)
    seg.ipc_fd_sent = sent == FdSend::Sent;
    if (sent == FdSend::Failed) {
      seg.ipc = Segment::State::Refused;
      CRYSTAL_INFO("send to {}: cannot hand over GPU allocation {} ({}); its bytes go as before",
                   peer_, k, why);
    }
    --ipc_fds_due_;
  }
}

RealSendComm::Segment* RealSendComm::ipcSegmentOf(const void* data, std::size_t size) {
  const auto* p = static_cast<const std::byte*>(data);
  for (Segment& s : segments_)
    if (s.ipc == Segment::State::Accepted && p >= s.alloc_base && p < s.alloc_base + s.alloc_size &&
        size <= s.alloc_size - static_cast<std::size_t>(p - s.alloc_base))
      return &s;
  return nullptr;
}

void RealSendComm::isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) {
  r.n = 1;
  r.data[0] = data;
  r.sizes[0] = size;
  r.tags[0] = tag;
  r.posted = now;
  r.bytes = size;
  r.step = steps_++;
  r.due = port_->reserve(now, link_.occupancy(size)) + link_.latency_ns;
  const MemRegion* region = size > 0 ? regionOf(data) : nullptr;
  // GPU to GPU (IpcData): the receiver copies out of the buffer itself, nothing to stage.
  if (region && region->type == nccl::NCCL_PTR_CUDA && !ipcSegmentOf(data, size)) {
    if (!gpu_) gpu_ = std::make_unique<DeviceQueue>(static_cast<int>(capacity()));
    const int s = slotOf(r);
    gpu_->deviceToHost(stagingOf(data, size), data, size);
    gpu_->mark(s);
    r.on_device[0] = r.staged = true;
  }
  queue_.push_back(slotOf(r));
  progress();
}

RealSendComm::Segment* RealSendComm::segmentOf(const void* data) {
  // The segment that is the staging twin of data's region, so the frame names the bytes the
  // staging copy wrote (a region registered again at the same address keeps its first twin).
  const MemRegion* region = regionOf(data);
  if (!region || region->type != nccl::NCCL_PTR_CUDA || segments_.empty()) return nullptr;
  const std::byte* twin = gpu_->twin(region->base, region->size);
  for (Segment& s : segments_)
    if (s.shm && s.shm->data() == twin) return &s;
  return nullptr;
}

void RealSendComm::readReplies() {
  for (;;) {
    const std::size_t n =
        fromPeer(reinterpret_cast<char*>(&reply_) + reply_got_, sizeof reply_ - reply_got_);
    if (n == 0) return;
    reply_got_ += n;
    if (reply_got_ < sizeof reply_) continue;
    reply_got_ = 0;
    if (reply_.magic != Reply{}.magic)
      throw PluginError(Errc::Remote, "real peer sent a corrupt reply");
    if (reply_.kind == ReplyKind::Ack) {
      if (reply_.value > shm_sent_ || reply_.value < reply_acked_)
        throw PluginError(Errc::Remote,
                          fmt::format("real peer acknowledged shared-memory frame {} of {} sent "
                                      "({} acknowledged before)",
                                      reply_.value, shm_sent_, reply_acked_));
      reply_acked_ = reply_.value;
      shm_acked_ = std::max(shm_acked_, reply_acked_);  // the GPU's word may be ahead
      continue;
    }
    if (reply_.kind == ReplyKind::IpcWant || reply_.kind == ReplyKind::IpcAccepted ||
        reply_.kind == ReplyKind::IpcRefused) {
      takeIpcReply();
      continue;
    }
    if ((reply_.kind != ReplyKind::ShmAccepted && reply_.kind != ReplyKind::ShmRefused) ||
        reply_.value >= segments_.size() ||
        segments_[reply_.value].state != Segment::State::Offered || !segments_[reply_.value].shm)
      throw PluginError(
          Errc::Remote,
          fmt::format("real peer answered an offer of shared memory segment {} "
                      "that is not pending (kind {}, {} offered)",
                      reply_.value, static_cast<unsigned>(reply_.kind), segments_.size()));
    Segment& seg = segments_[reply_.value];
    seg.shm->unlink();  // the peer mapped it (and unlinked it) or never will
    if (reply_.kind == ReplyKind::ShmAccepted) {
      seg.state = Segment::State::Accepted;
    } else {
      seg.state = Segment::State::Refused;
      CRYSTAL_INFO(
          "send to {}: the peer cannot map shared memory {} (another machine?); its "
          "bytes go over TCP",
          peer_, seg.shm->name());
    }
  }
}

void RealSendComm::takeIpcReply() {
  Segment* seg = reply_.value < segments_.size() ? &segments_[reply_.value] : nullptr;
  const bool pending = seg && seg->ipc == Segment::State::Offered;
  const bool fits =
      pending && (reply_.kind == ReplyKind::IpcWant       ? seg->ipc_token == 0 && reply_.extra != 0
                  : reply_.kind == ReplyKind::IpcAccepted ? seg->ipc_fd_sent
                                                          : true);
  if (!fits)
    throw PluginError(
        Errc::Remote,
        fmt::format("real peer answered an offer of GPU allocation {} that is not "
                    "pending (kind {}, {} offered)",
                    reply_.value, static_cast<unsigned>(reply_.kind), segments_.size()));
  if (reply_.kind == ReplyKind::IpcWant) {
    seg->ipc_token = reply_.extra;
    ++ipc_fds_due_;
    sendIpcFds();
  } else if (reply_.kind == ReplyKind::IpcAccepted) {
    seg->ipc = Segment::State::Accepted;
    CRYSTAL_INFO("send to {}: the peer mapped GPU allocation {} ({} bytes); sends from it go GPU "
                 "to GPU",
                 peer_, reply_.value, seg->alloc_size);
  } else {
    if (seg->ipc_token != 0 && !seg->ipc_fd_sent) --ipc_fds_due_;
    seg->ipc = Segment::State::Refused;
    seg->ipc_fd = Fd{};
    CRYSTAL_INFO("send to {}: the peer cannot map GPU allocation {}; its bytes go as before", peer_,
                 reply_.value);
  }
}

void RealSendComm::openStream() {
  if (!offer_shm_ || !paramBool("CRYSTAL_SHM_STREAM")) return;
  std::string why;
  stream_ = ShmStream::create(&why);
  if (!stream_) return;  // the first GPU region's offer will say why shared memory is missing
  FrameHeader h;
  h.kind = FrameKind::StreamPage;
  ShmOfferBody body;
  std::snprintf(body.name, sizeof body.name, "%s", stream_->name().c_str());
  control_.append(reinterpret_cast<const char*>(&h), sizeof h);
  control_.append(reinterpret_cast<const char*>(&body), sizeof body);
}

std::size_t RealSendComm::toPeer(const void* p, std::size_t n) {
  return writeStream(stream_.get(), fd_.get(), p, n);
}

std::size_t RealSendComm::fromPeer(void* p, std::size_t n) {
  return readStream(stream_.get(), fd_.get(), p, n);
}

bool RealSendComm::flushControl() {
  while (control_done_ < control_.size()) {
    const std::size_t n = toPeer(control_.data() + control_done_, control_.size() - control_done_);
    if (n == 0) return false;
    control_done_ += n;
  }
  control_.clear();
  control_done_ = 0;
  return true;
}

// The receiver's GPU writer stores, in the stream's page, the frames its kernel has copied
// (RealRecvComm::releaseWord): one load, no turn of the receiver's proxy.
void RealSendComm::takeGpuAcks() {
  const std::uint64_t copied = stream_->gpuCopied();
  if (copied <= shm_acked_) return;
  if (copied > shm_sent_)
    throw PluginError(
        Errc::Remote,
        fmt::format("real peer's GPU copied shared-memory frame {} of {} sent", copied, shm_sent_));
  shm_acked_ = copied;
}

void RealSendComm::progress() {
  if (!segments_.empty()) readReplies();  // replies answer offers: none on a TCP-only stream
  if (ipc_fds_due_ > 0) sendIpcFds();
  for (;;) {
    const bool between_frames = hdr_done_ == 0 && body_done_ == 0;
    if (between_frames && !flushControl()) return;  // offers never split a data frame
    if (queue_.empty()) return;
    const int s = queue_.front();
    Request& r = *slot(s);
    // A GPU buffer: its bytes leave from the staging copy once that copy is done.
    if (r.staged && !gpu_->done(s)) return;
    if (between_frames) {
      Segment* ipc = !r.staged && r.sizes[0] > 0 ? ipcSegmentOf(r.data[0], r.sizes[0]) : nullptr;
      Segment* seg = r.staged && r.sizes[0] > 0 ? segmentOf(r.data[0]) : nullptr;
      if (seg && seg->state == Segment::State::Offered) return;  // the answer picks the route
      hdr_ = FrameHeader{};
      hdr_.tag = r.tags[0];
      hdr_.size = r.sizes[0];
      hdr_.due_ns = r.due;
      if (seg && seg->state == Segment::State::Accepted) {
        // The bytes are there already: the staging copy went into the segment, its twin.
        const auto off =
            static_cast<std::size_t>(static_cast<const std::byte*>(r.data[0]) -
                                     static_cast<const std::byte*>(regionOf(r.data[0])->base));
        hdr_.kind = FrameKind::ShmData;
        hdr_.segment = static_cast<std::uint32_t>(seg - segments_.data());
        hdr_.offset = off;
        r.shm_frame = ++shm_sent_;
      } else if (ipc) {
        // Not staged: the receiver copies straight out of the buffer, at its allocation offset.
        hdr_.kind = FrameKind::IpcData;
        hdr_.segment = static_cast<std::uint32_t>(ipc - segments_.data());
        hdr_.offset =
            static_cast<std::uint64_t>(static_cast<const std::byte*>(r.data[0]) - ipc->alloc_base);
        r.shm_frame = ++shm_sent_;
      }
    }
    while (hdr_done_ < sizeof hdr_) {
      const std::size_t n =
          toPeer(reinterpret_cast<const char*>(&hdr_) + hdr_done_, sizeof hdr_ - hdr_done_);
      if (n == 0) return;
      hdr_done_ += n;
    }
    if (hdr_.kind == FrameKind::Data) {
      const char* body = r.staged ? reinterpret_cast<const char*>(stagingOf(r.data[0], r.sizes[0]))
                                  : static_cast<const char*>(r.data[0]);
      while (body_done_ < r.sizes[0]) {
        const std::size_t n = toPeer(body + body_done_, r.sizes[0] - body_done_);
        if (n == 0) return;
        body_done_ += n;
      }
    }
    r.filled[0] = true;
    hdr_done_ = body_done_ = 0;
    queue_.pop_front();
  }
}

std::byte* RealSendComm::stagingOf(const void* data, std::size_t size) {
  const MemRegion* region = regionOf(data);
  if (!region || region->type != nccl::NCCL_PTR_CUDA)
    throw PluginError(Errc::BadUsage, "isend: GPU buffer is no longer registered on this comm");
  const auto off = static_cast<std::size_t>(static_cast<const std::byte*>(data) -
                                            static_cast<const std::byte*>(region->base));
  (void)size;  // within the region: checked at isend (checkRange)
  return gpu_->twin(region->base, region->size) + off;
}

void RealSendComm::warnIfStalled(const Request& r, live::TimeNs now) {
  if (stall_warned_ || now - r.posted < stall_ns_) return;
  stall_warned_ = true;  // once per comm: the log must stay readable in a long stall
  const Segment* seg = r.filled[0] || r.sizes[0] == 0 ? nullptr : segmentOf(r.data[0]);
  const char* what =
      r.staged && !r.filled[0] && !gpu_->done(slotOf(r))
          ? "its device-to-host staging copy (the GPU has not run it)"
      : seg && seg->state == Segment::State::Offered
          ? "the real peer to answer the offer of its shared memory (the peer's proxy does not "
            "post or progress a receive)"
      : !r.filled[0] ? "the real peer to read the bytes (TCP send blocked: the "
                       "peer's proxy does not post or progress a receive)"
      : r.shm_frame > shm_acked_
          ? "the real peer to copy the bytes out of shared memory (its acknowledgement)"
          : "its modelled delivery time";
  std::string shm;
  if (!segments_.empty()) {
    std::size_t offered = 0, accepted = 0, ipc_offered = 0, ipc_accepted = 0;
    for (const Segment& s : segments_) {
      offered += s.state == Segment::State::Offered;
      accepted += s.state == Segment::State::Accepted;
      ipc_offered += s.ipc == Segment::State::Offered;
      ipc_accepted += s.ipc == Segment::State::Accepted;
    }
    shm = fmt::format(
        "; shared memory: {} segments ({} accepted, {} unanswered); GPU allocations: {} mapped "
        "by the peer, {} pending ({} fds waiting for room in its inbox); {} frames sent, {} "
        "acknowledged, {} offer bytes unsent, {} sends queued",
        segments_.size(), accepted, offered, ipc_accepted, ipc_offered, ipc_fds_due_, shm_sent_,
        shm_acked_, control_.size() - control_done_, queue_.size());
  }
  CRYSTAL_WARN(
      "send to {} (net dev {}): step {} ({} bytes, tag {}) has waited {:.1f} s (> the "
      "emulation timeout) for {}{}; still waiting",
      peer_, dev(), r.step, r.sizes[0], r.tags[0], static_cast<double>(now - r.posted) / 1e9, what,
      shm);
}

bool RealSendComm::test(Request& r, live::TimeNs now, int* sizes) {
  if (r.shm_frame > shm_acked_ && stream_) takeGpuAcks();
  if (!r.filled[0] || r.shm_frame > shm_acked_) progress();
  if (!r.filled[0] || r.shm_frame > shm_acked_ || now < r.due) {
    warnIfStalled(r, now);
    return false;
  }
  if (sizes) sizes[0] = static_cast<int>(r.sizes[0]);
  return true;
}

void RealRecvComm::registered(const MemRegion& region) {
  if (region.type != nccl::NCCL_PTR_CUDA || region.size == 0) return;
  (void)gpu().twin(region.base, region.size);
  // The GPU writer copies the sender's steps GPU to GPU (device_queue.h copyAnyOrder); made
  // here, at connection setup, as its first launch may wait for the device.
  if (writer_tried_) return;
  writer_tried_ = true;
  if (!paramBool("CRYSTAL_GPU_WRITER") || paramInt("CRYSTAL_GPU_COPY_MAX") <= 0) return;
  std::string why;  // forCurrentContext logs it
  try {
    if (auto w = GpuWriter::forCurrentContext(&why)) gpu().setGpuWriter(std::move(w));
  } catch (const std::exception& e) {  // an optimisation: never fail NCCL for it
    CRYSTAL_INFO("GPU writer not used for copies from {}: {}", peer_, e.what());
  }
}

void RealRecvComm::irecv(Request& r, int n, void** data, const std::size_t* sizes, const int* tags,
                         live::TimeNs now) {
  r.n = n;
  for (int i = 0; i < n; ++i) {
    r.data[i] = data[i];
    r.sizes[i] = sizes[i];
    r.tags[i] = tags ? tags[i] : 0;
    r.bytes += sizes[i];
    const MemRegion* region = sizes[i] > 0 ? regionOf(data[i]) : nullptr;
    r.on_device[i] = region && region->type == nccl::NCCL_PTR_CUDA;
  }
  r.posted = now;
  r.due = 0;
  r.step = steps_++;
  if (gpu_) gpu_->newPoll();
  if (protocol_buffers_ < 0) protocol_buffers_ = std::min(3, registrations());
  posted_.push_back(slotOf(r));
  progress(now);
}

void RealRecvComm::progress(live::TimeNs now) {
  while (readFrame(now)) {
  }
  flushAcks();
}

bool RealRecvComm::readFrame(live::TimeNs now) {
  // Read only what a posted receive still waits for: the peer may have sent everything
  // and closed, and an end of stream is an error only if we still need bytes.
  if (hdr_done_ == 0 && target_slot_ < 0) {
    bool waiting = false;
    for (int s : posted_) {
      const Request& r = *slot(s);
      for (int i = 0; i < r.n; ++i) waiting = waiting || !r.filled[i];
    }
    if (!waiting) return false;
  }
  while (hdr_done_ < sizeof hdr_) {
    const std::size_t n =
        fromPeer(reinterpret_cast<char*>(&hdr_) + hdr_done_, sizeof hdr_ - hdr_done_);
    if (n == 0) return false;
    hdr_done_ += n;
  }
  if (hdr_.magic != FrameHeader{}.magic)
    throw PluginError(Errc::Remote, "real peer sent a corrupt frame header");
  // Control frames: an offer's body, then its handler; a fd notice has none.
  const auto control = [&](void* body, std::size_t size, void (RealRecvComm::*take)()) {
    while (body_done_ < size) {
      const std::size_t n = fromPeer(static_cast<char*>(body) + body_done_, size - body_done_);
      if (n == 0) return false;
      body_done_ += n;
    }
    (this->*take)();
    hdr_done_ = body_done_ = 0;
    return true;
  };
  if (hdr_.kind == FrameKind::ShmOffer)
    return control(&offer_, sizeof offer_, &RealRecvComm::takeOffer);
  if (hdr_.kind == FrameKind::IpcOffer)
    return control(&ipc_offer_, sizeof ipc_offer_, &RealRecvComm::takeIpcOffer);
  if (hdr_.kind == FrameKind::IpcFd) return control(nullptr, 0, &RealRecvComm::takeIpcFd);
  if (hdr_.kind == FrameKind::StreamPage)
    return control(&offer_, sizeof offer_, &RealRecvComm::takeStreamPage);
  if (hdr_.kind != FrameKind::Data && hdr_.kind != FrameKind::ShmData &&
      hdr_.kind != FrameKind::IpcData)
    throw PluginError(Errc::Remote, fmt::format("real peer sent a frame of unknown kind {}",
                                                static_cast<unsigned>(hdr_.kind)));
  if (target_slot_ < 0) {
    // Oldest posted entry with this tag that is still empty.
    for (int s : posted_) {
      Request& r = *slot(s);
      for (int i = 0; i < r.n && target_slot_ < 0; ++i)
        if (!r.filled[i] && r.tags[i] == hdr_.tag) {
          target_slot_ = s;
          target_entry_ = i;
        }
      if (target_slot_ >= 0) break;
    }
    if (target_slot_ < 0) return false;  // wait for NCCL to post a matching receive
    const Request& r = *slot(target_slot_);
    if (hdr_.size > r.sizes[target_entry_])
      throw PluginError(Errc::Remote,
                        fmt::format("real peer sent {} bytes with tag {} into a {}-byte receive",
                                    hdr_.size, hdr_.tag, r.sizes[target_entry_]));
  }
  Request& r = *slot(target_slot_);
  takeBody(r, now);
  if (!r.filled[target_entry_]) return false;  // TCP body not all here yet
  hdr_done_ = body_done_ = 0;
  target_slot_ = target_entry_ = -1;
  return true;
}

RealRecvComm::PeerSegment& RealRecvComm::offeredSegment(bool ipc) {
  // A region's offers share its number: a new number is the next one, a second offer (the
  // other kind) names the last.
  const std::uint32_t k = hdr_.segment;
  if (k == segments_.size()) segments_.emplace_back();
  // (in size_t: a peer's 0xffffffff must not wrap to 0 and name an empty table's last entry)
  PeerSegment* seg = std::size_t{k} + 1 == segments_.size() ? &segments_.back() : nullptr;
  if (!seg || (ipc ? seg->ipc_offered : seg->shm_offered))
    throw PluginError(Errc::Remote,
                      fmt::format("real peer offered {} segment {} where {} was next",
                                  ipc ? "GPU allocation" : "shared memory", k, segments_.size()));
  (ipc ? seg->ipc_offered : seg->shm_offered) = true;
  return *seg;
}

void RealRecvComm::takeOffer() {
  PeerSegment& seg = offeredSegment(false);
  offer_.name[sizeof offer_.name - 1] = '\0';
  std::string why = "CRYSTAL_SHM=0 on this side";
  auto shm = paramBool("CRYSTAL_SHM") ? ShmSegment::open(offer_.name, hdr_.size, &why) : nullptr;
  if (!shm)
    CRYSTAL_INFO(
        "receive from {}: cannot map the sender's shared memory {} ({}); its bytes "
        "come over TCP",
        peer_, offer_.name, why);
  queueReply(shm ? ReplyKind::ShmAccepted : ReplyKind::ShmRefused, hdr_.segment);
  seg.shm = std::move(shm);
}

void RealRecvComm::takeStreamPage() {
  if (stream_) throw PluginError(Errc::Remote, "real peer sent a second stream page");
  offer_.name[sizeof offer_.name - 1] = '\0';
  std::string why = "CRYSTAL_SHM=0 on this side";
  if (paramBool("CRYSTAL_SHM"))
    stream_ = ShmStream::open(offer_.name, got_bytes_, sent_bytes_, &why);
  if (!stream_)
    CRYSTAL_INFO(
        "receive from {}: cannot map the sender's stream page {} ({}); frames and replies "
        "stay on TCP",
        peer_, offer_.name, why);
}

std::size_t RealRecvComm::toPeer(const void* p, std::size_t n) {
  const std::size_t k = writeStream(stream_.get(), fd_.get(), p, n);
  sent_bytes_ += k;
  return k;
}

std::size_t RealRecvComm::fromPeer(void* p, std::size_t n) {
  const std::size_t k = readStream(stream_.get(), fd_.get(), p, n);
  got_bytes_ += k;
  return k;
}

void RealRecvComm::takeIpcOffer() {
  PeerSegment& seg = offeredSegment(true);
  if (hdr_.offset > hdr_.size || ipc_offer_.region_size > hdr_.size - hdr_.offset)
    throw PluginError(Errc::Remote,
                      fmt::format("real peer offered a {}-byte GPU region at offset {} of a "
                                  "{}-byte allocation",
                                  ipc_offer_.region_size, hdr_.offset, hdr_.size));
  seg.ipc_key = ipc_offer_.key;
  seg.ipc_size = hdr_.size;
  std::string why = "CRYSTAL_IPC=0 on this side";
  std::uint64_t token = 0;
  if (paramBool("CRYSTAL_IPC")) {
    try {
      token = FdInbox::get().token();
    } catch (const PluginError& e) {
      why = e.what();
    }
  }
  if (token != 0) {
    queueReply(ReplyKind::IpcWant, hdr_.segment, token);
    return;
  }
  CRYSTAL_INFO("receive from {}: no GPU to GPU copies from the sender's allocation {} ({})", peer_,
               hdr_.segment, why);
  queueReply(ReplyKind::IpcRefused, hdr_.segment);
}

void RealRecvComm::takeIpcFd() {
  PeerSegment* seg = hdr_.segment < segments_.size() ? &segments_[hdr_.segment] : nullptr;
  if (!seg || !seg->ipc_offered || seg->ipc_fd_seen)
    throw PluginError(Errc::Remote,
                      fmt::format("real peer handed over GPU allocation {}, which it did not "
                                  "offer or handed over before",
                                  hdr_.segment));
  seg->ipc_fd_seen = true;
  if (hdr_.size == 0) return;  // the sender could not reach this process's inbox: it gave up
  std::string why = "its fd did not arrive in this process's inbox";
  try {
    Fd fd = FdInbox::get().take(seg->ipc_key);
    if (fd.valid()) seg->ipc = gpu().importAllocation(fd.get(), seg->ipc_size, &why);
  } catch (const PluginError& e) {
    why = e.what();
  }
  if (!seg->ipc)
    CRYSTAL_INFO(
        "receive from {}: cannot map the sender's GPU allocation {} ({}); its bytes "
        "come as before",
        peer_, hdr_.segment, why);
  queueReply(seg->ipc ? ReplyKind::IpcAccepted : ReplyKind::IpcRefused, hdr_.segment);
}

void RealRecvComm::takeBody(Request& r, live::TimeNs now) {
  const int e = target_entry_;
  const bool staged = r.on_device[e];
  if (hdr_.kind == FrameKind::IpcData) {
    const PeerSegment* seg = hdr_.segment < segments_.size() ? &segments_[hdr_.segment] : nullptr;
    if (!seg || !seg->ipc)
      throw PluginError(Errc::Remote,
                        fmt::format("real peer sent bytes from GPU allocation {}, which it did "
                                    "not offer or this side could not map",
                                    hdr_.segment));
    if (hdr_.offset > seg->ipc_size || hdr_.size > seg->ipc_size - hdr_.offset)
      throw PluginError(Errc::Remote,
                        fmt::format("real peer sent {} bytes at offset {} of a {}-byte GPU "
                                    "allocation",
                                    hdr_.size, hdr_.offset, seg->ipc_size));
    const std::uint64_t frame = ++shm_got_;
    // The kernel may tell the sender itself once no earlier frame is owed another way.
    const cuda::DevicePtr release = owed_unreleased_ == 0 ? releaseWord() : 0;
    const bool released = copyPeerGpu(r, e, seg->ipc + hdr_.offset, hdr_.size, release, frame);
    gpu().mark(target_slot_ * kMaxGroup);
    r.staged = true;
    owed_.push_back({frame, target_slot_ * kMaxGroup, released});
    owed_unreleased_ += !released;
  } else if (hdr_.kind == FrameKind::ShmData) {
    PeerSegment* seg = hdr_.segment < segments_.size() ? &segments_[hdr_.segment] : nullptr;
    if (!seg || !seg->shm)
      throw PluginError(Errc::Remote,
                        fmt::format("real peer sent bytes through shared memory segment {}, "
                                    "which it did not offer or this side could not map",
                                    hdr_.segment));
    if (hdr_.offset > seg->shm->size() || hdr_.size > seg->shm->size() - hdr_.offset)
      throw PluginError(Errc::Remote,
                        fmt::format("real peer sent {} bytes at offset {} of a {}-byte shared "
                                    "memory segment",
                                    hdr_.size, hdr_.offset, seg->shm->size()));
    char* src = reinterpret_cast<char*>(seg->shm->data() + hdr_.offset);
    if (staged && registerPeerSegment(*seg)) {
      // Straight from the mapping: the bytes stay there until the copy is done.
      copyToDevice(r, e, src, hdr_.size);
      gpu().mark(target_slot_ * kMaxGroup);
      r.staged = true;
      owed_.push_back({++shm_got_, target_slot_ * kMaxGroup});
      ++owed_unreleased_;
    } else if (staged) {
      // Through the pinned twin: out of the segment at once.
      char* twin = reinterpret_cast<char*>(stagingOf(r.data[e], hdr_.size));
      std::memcpy(twin, src, hdr_.size);
      owed_.push_back({++shm_got_, -1});
      ++owed_unreleased_;
      copyToDevice(r, e, twin, hdr_.size);
      gpu().mark(target_slot_ * kMaxGroup);
      r.staged = true;
    } else {
      if (hdr_.size > 0) std::memcpy(r.data[e], src, hdr_.size);
      owed_.push_back({++shm_got_, -1});
      ++owed_unreleased_;
    }
  } else {
    char* dst = staged ? reinterpret_cast<char*>(stagingOf(r.data[e], hdr_.size))
                       : static_cast<char*>(r.data[e]);
    while (body_done_ < hdr_.size) {
      const std::size_t n = fromPeer(dst + body_done_, hdr_.size - body_done_);
      if (n == 0) return;
      body_done_ += n;
    }
    if (staged) {
      // The GPU buffer gets the bytes by async copies; the request waits for its event.
      copyToDevice(r, e, dst, hdr_.size);
      gpu().mark(target_slot_ * kMaxGroup);
      r.staged = true;
    }
  }
  r.filled[e] = true;
  r.got[e] = hdr_.size;
  // Released no earlier than the target would have delivered it.
  const live::TimeNs due =
      shared_clock_ ? hdr_.due_ns : r.posted + link_.occupancy(hdr_.size) + link_.latency_ns;
  r.due = std::max({r.due, due, now});
}

// Page-locks the sender's segment on the first copy from it, so the copy engines read it
// directly; where the driver refuses, each frame is copied into the pinned twin first.
bool RealRecvComm::registerPeerSegment(PeerSegment& seg) {
  if (!seg.register_tried) {
    seg.register_tried = true;
    std::string why;
    seg.registered = gpu().registerHost(seg.shm->data(), seg.shm->size(), &why);
    if (!seg.registered)
      CRYSTAL_INFO("receive from {}: {}; its shared memory is copied through the pinned twin",
                   peer_, why);
  }
  return seg.registered;
}

void RealRecvComm::queueReply(ReplyKind kind, std::uint64_t value, std::uint64_t extra) {
  Reply reply;
  reply.kind = kind;
  reply.value = value;
  reply.extra = extra;
  replies_.append(reinterpret_cast<const char*>(&reply), sizeof reply);
}

void RealRecvComm::flushAcks() {
  std::uint64_t last = acked_;
  while (!owed_.empty() && (owed_.front().event < 0 || gpu().doneInPoll(owed_.front().event))) {
    last = owed_.front().frame;
    owed_unreleased_ -= !owed_.front().released;
    owed_.pop_front();
  }
  if (last > acked_) {
    acked_ = last;
    queueReply(ReplyKind::Ack, last);
  }
  while (replies_done_ < replies_.size()) {
    const std::size_t n = toPeer(replies_.data() + replies_done_, replies_.size() - replies_done_);
    if (n == 0) return;
    replies_done_ += n;
  }
  replies_.clear();
  replies_done_ = 0;
}

bool RealRecvComm::test(Request& r, live::TimeNs now, int* sizes) {
  if (gpu_) gpu_->newPoll();
  if (!owed_.empty() || !replies_.empty()) flushAcks();
  const bool all = [&] {
    for (int i = 0; i < r.n; ++i)
      if (!r.filled[i]) return false;
    return true;
  }();
  if (!all) {
    progress(now);
    for (int i = 0; i < r.n; ++i)
      if (!r.filled[i]) {
        warnIfStalled(r, now, "bytes from the real peer");
        return false;
      }
  }
  if (r.staged && !gpu_->doneInPoll(slotOf(r) * kMaxGroup)) {
    warnIfStalled(r, now, "the host-to-device copy of its staged bytes (the GPU has not run it)");
    return false;
  }
  if (now < r.due) {
    warnIfStalled(r, now, "its modelled delivery time");
    return false;
  }
  // Its copy out of shared memory is done: say so now, as NCCL may not call again (the last
  // receive of a job), and the sender's request waits for it.
  if (!owed_.empty()) flushAcks();
  if (sizes)
    for (int i = 0; i < r.n; ++i) sizes[i] = static_cast<int>(r.got[i]);
  posted_.erase(std::find(posted_.begin(), posted_.end(), slotOf(r)));
  return true;
}

std::byte* RealRecvComm::stagingOf(const void* data, std::size_t size) {
  const MemRegion* region = regionOf(data);
  if (!region || region->type != nccl::NCCL_PTR_CUDA)
    throw PluginError(Errc::BadUsage, "irecv: GPU buffer is no longer registered on this comm");
  const auto off = static_cast<std::size_t>(static_cast<const std::byte*>(data) -
                                            static_cast<const std::byte*>(region->base));
  if (off + size > region->size)
    throw PluginError(Errc::Remote,
                      fmt::format("real peer sent {} bytes past the end of a {}-byte GPU region",
                                  size, region->size));
  return gpu().twin(region->base, region->size) + off;
}

void RealRecvComm::copyToDevice(const Request& r, int entry, char* staged, std::size_t bytes) {
  void* dst = r.data[entry];
  const MemRegion* region = regionOf(dst);
  const std::size_t lines = bytes / proto::kLL128Line;
  if (!region || protoOfRegion(region->ordinal, protocol_buffers_) != proto::Proto::LL128 ||
      lines == 0) {
    gpu().hostToDevice(dst, staged, bytes);
    return;
  }
  // Every line of one step carries the same flag (the sender's step); a step whose lines
  // disagree is copied as it came (then it is the sender's own inconsistency).
  constexpr std::size_t kFlag = proto::kLL128FlagWord * 8;
  std::uint64_t flag = 0;
  std::memcpy(&flag, staged + kFlag, 8);
  for (std::size_t i = 1; i < lines; ++i)
    if (std::memcmp(staged + i * proto::kLL128Line + kFlag, &flag, 8) != 0) {
      gpu().hostToDevice(dst, staged, bytes);
      return;
    }
  for (std::size_t i = 0; i < lines; ++i) std::memset(staged + i * proto::kLL128Line + kFlag, 0, 8);
  gpu().hostToDevice(dst, staged, bytes);
  // Little-endian u64: high half at +124 first, then the low half at +120.
  char* d = static_cast<char*>(dst);
  gpu().fill32(d + kFlag + 4, proto::kLL128Line, static_cast<std::uint32_t>(flag >> 32), lines);
  gpu().fill32(d + kFlag, proto::kLL128Line, static_cast<std::uint32_t>(flag), lines);
}

// GPU to GPU out of the sender's mapped allocation, on the comm's queue. LL128 lines: a copy
// engine need not write a line in order, so the data words go first and the flag words
// after, in stream order (the flag words keep an older step's flag until then).
bool RealRecvComm::copyPeerGpu(Request& r, int entry, const std::byte* src, std::size_t bytes,
                               cuda::DevicePtr release, std::uint64_t frame) {
  void* dst = r.data[entry];
  if (bytes == 0) return false;
  if (!r.on_device[entry]) {
    gpu().deviceToHost(dst, src, bytes);
    return false;
  }
  const MemRegion* region = regionOf(dst);
  constexpr std::size_t kLine = proto::kLL128Line, kFlag = proto::kLL128FlagWord * 8;
  const std::size_t lines = bytes / kLine;
  if (!region || protoOfRegion(region->ordinal, protocol_buffers_) != proto::Proto::LL128 ||
      lines == 0 || bytes % kLine != 0)
    return gpu().copyAnyOrder(dst, src, bytes, release, frame);  // the request's only work

  auto* d = static_cast<std::byte*>(dst);
  gpu().deviceToDevice2D(d, src, kLine, kFlag, lines);
  if (kFlag + 8 < kLine)
    gpu().deviceToDevice2D(d + kFlag + 8, src + kFlag + 8, kLine, kLine - kFlag - 8, lines);
  gpu().deviceToDevice2D(d + kFlag, src + kFlag, kLine, 8, lines);
  return false;
}

// The device address of the stream page's gpu_copied word, the page registered for the GPU
// on first use; 0 where there is none: no page yet (TCP), no GPU writer, CRYSTAL_GPU_ACK=0,
// or a driver that will not register it (said once).
cuda::DevicePtr RealRecvComm::releaseWord() {
  if (release_word_ != 0 || release_tried_ || !stream_ || !gpu().hasGpuWriter())
    return release_word_;
  release_tried_ = true;
  if (!paramBool("CRYSTAL_GPU_ACK")) return 0;
  std::string why;
  cuda::DevicePtr page = 0;
  if (!gpu().registerHostMapped(stream_->pageData(), stream_->pageSize(), &page, &why)) {
    CRYSTAL_INFO("receive from {}: the sender learns of copied frames from this proxy only ({})",
                 peer_, why);
    return 0;
  }
  const auto off = static_cast<std::size_t>(
      reinterpret_cast<const std::byte*>(&stream_->gpuCopiedWord()) - stream_->pageData());
  release_word_ = page + off;
  return release_word_;
}

void RealRecvComm::warnIfStalled(const Request& r, live::TimeNs now, const char* what) {
  if (stall_warned_ || now - r.posted < stall_ns_) return;
  stall_warned_ = true;  // once per comm: the log must stay readable in a long stall
  std::string need;
  for (int i = 0; i < r.n; ++i)
    if (!r.filled[i])
      need +=
          fmt::format("{}tag {} (<= {} bytes)", need.empty() ? "" : ", ", r.tags[i], r.sizes[i]);
  std::string stream;
  if (hdr_done_ > 0 && hdr_done_ < sizeof hdr_)
    stream = fmt::format("; a frame header is half read ({} of {} bytes)", hdr_done_, sizeof hdr_);
  else if (hdr_done_ == sizeof hdr_ && target_slot_ < 0)
    stream =
        fmt::format("; the peer's next frame (kind {}, tag {}, {} bytes) matches no posted receive",
                    static_cast<unsigned>(hdr_.kind), hdr_.tag, hdr_.size);
  else if (hdr_done_ == sizeof hdr_)
    stream = fmt::format("; {} of {} body bytes of the frame with tag {} arrived", body_done_,
                         hdr_.size, hdr_.tag);
  if (!segments_.empty()) {
    std::size_t mapped = 0, ipc = 0;
    for (const PeerSegment& s : segments_) {
      mapped += s.shm != nullptr;
      ipc += s.ipc != nullptr;
    }
    stream += fmt::format(
        "; shared memory: {} of {} offered segments mapped, {} GPU allocations mapped, {} "
        "frames copied out, {} acknowledged, {} reply bytes unsent",
        mapped, segments_.size(), ipc, shm_got_, acked_, replies_.size() - replies_done_);
  }
  CRYSTAL_WARN(
      "receive from {} (net dev {}): step {} ({} entries{}{}) has waited {:.1f} s (> the "
      "emulation timeout) for {}{}; still waiting (legit only if the peer is idle)",
      peer_, dev(), r.step, r.n, need.empty() ? "" : ", missing ", need,
      static_cast<double>(now - r.posted) / 1e9, what, stream);
}

DeviceQueue& RealRecvComm::gpu() {
  if (!gpu_) gpu_ = std::make_unique<DeviceQueue>(static_cast<int>(capacity()) * kMaxGroup);
  return *gpu_;
}

}  // namespace crystal::plugin
