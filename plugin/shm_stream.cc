#include "shm_stream.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "errors.h"
#include "socket.h"

namespace crystal::plugin {

namespace {
constexpr std::size_t kHeader = 4096;  // the StreamPage; the two rings follow it
constexpr std::size_t kBytes = kHeader + 2 * StreamPage::kRing;
static_assert(sizeof(StreamPage) <= kHeader);
static_assert((StreamPage::kRing & (StreamPage::kRing - 1)) == 0, "the ring wraps by masking");
}  // namespace

ShmStream::ShmStream(std::unique_ptr<ShmSegment> shm, bool sender)
    : shm_(std::move(shm)), page_(reinterpret_cast<StreamPage*>(shm_->data())), sender_(sender) {
  out_ = sender ? &page_->frames : &page_->replies;
  in_ = sender ? &page_->replies : &page_->frames;
}

std::unique_ptr<ShmStream> ShmStream::create(std::string* why) {
  auto shm = ShmSegment::create(kBytes, why);
  if (!shm) return nullptr;
  new (shm->data()) StreamPage;  // fresh pages are zero; this sets the magic
  return std::unique_ptr<ShmStream>(new ShmStream(std::move(shm), true));
}

std::unique_ptr<ShmStream> ShmStream::open(const std::string& name, std::uint64_t socket_read,
                                           std::uint64_t socket_written, std::string* why) {
  auto shm = ShmSegment::open(name, kBytes, why);
  if (!shm) return nullptr;
  std::uint64_t magic = 0;
  std::memcpy(&magic, shm->data(), sizeof magic);
  if (magic != StreamPage::kMagic) {
    *why = "not a stream page";
    return nullptr;
  }
  std::unique_ptr<ShmStream> s(new ShmStream(std::move(shm), false));
  s->socket_read_ = socket_read;
  s->socket_written_ = socket_written;
  // Replies move now: their socket part ends here, and the sender learns it with `attached`.
  s->out_->socket.store(socket_written, std::memory_order_relaxed);
  s->out_->moved.store(1, std::memory_order_relaxed);
  s->page_->attached.store(1, std::memory_order_release);
  return s;
}

std::byte* ShmStream::ring(const StreamLane* lane) const {
  return shm_->data() + kHeader + (lane == &page_->frames ? 0 : StreamPage::kRing);
}

std::size_t ShmStream::write(int fd, const void* p, std::size_t n) {
  if (sender_ && out_->moved.load(std::memory_order_relaxed) == 0 &&
      page_->attached.load(std::memory_order_acquire) != 0)
    out_->moved.store(1, std::memory_order_release);  // after the last socket count below
  if (out_->moved.load(std::memory_order_relaxed) == 0) {
    const std::size_t k = sendSome(fd, p, n);
    socket_written_ += k;
    out_->socket.store(socket_written_, std::memory_order_release);
    return k;
  }
  constexpr std::uint64_t kRing = StreamPage::kRing;
  if (head_ - out_tail_ + n > kRing) {
    out_tail_ = out_->tail.load(std::memory_order_acquire);
    if (head_ - out_tail_ > kRing)  // a tail past our head
      throw PluginError(Errc::Remote, "real peer's shared-memory stream is corrupt (bad tail)");
  }
  const std::size_t k = std::min<std::uint64_t>(n, kRing - (head_ - out_tail_));
  if (k == 0) {
    look(fd);  // no room: a reader that died never makes any
    return 0;
  }
  std::byte* r = ring(out_);
  const std::size_t at = head_ & (kRing - 1), first = std::min<std::size_t>(k, kRing - at);
  std::memcpy(r + at, p, first);
  std::memcpy(r, static_cast<const std::byte*>(p) + first, k - first);
  head_ += k;
  out_->head.store(head_, std::memory_order_release);
  return k;
}

std::size_t ShmStream::read(int fd, void* p, std::size_t n) {
  const bool moved = in_->moved.load(std::memory_order_acquire) != 0;
  // The socket part: all of it before the move, what the writer counted after it.
  const std::uint64_t counted = in_->socket.load(std::memory_order_acquire);
  if (!moved || socket_read_ < counted) {
    const bool attached = page_->attached.load(std::memory_order_acquire) != 0;
    if (!moved && attached && counted == socket_read_) {
      // Nothing announced: ask the socket only once a millisecond (a dead peer, or bytes
      // written without a count).
      const live::TimeNs now = live::nowNs();
      if (now - last_look_ < kLook) return 0;
      last_look_ = now;
    }
    const std::size_t k =
        recvSome(fd, p, moved ? std::min<std::uint64_t>(n, counted - socket_read_) : n);
    socket_read_ += k;
    return k;
  }
  constexpr std::uint64_t kRing = StreamPage::kRing;
  if (in_head_ == tail_) in_head_ = in_->head.load(std::memory_order_acquire);
  if (in_head_ - tail_ > kRing)  // (a head behind the tail wraps to a huge count too)
    throw PluginError(Errc::Remote, "real peer's shared-memory stream is corrupt (ring overrun)");
  const std::size_t k = std::min<std::uint64_t>(n, in_head_ - tail_);
  if (k == 0) {
    look(fd);
    return 0;
  }
  const std::byte* r = ring(in_);
  const std::size_t at = tail_ & (kRing - 1), first = std::min<std::size_t>(k, kRing - at);
  std::memcpy(p, r + at, first);
  std::memcpy(static_cast<std::byte*>(p) + first, r, k - first);
  tail_ += k;
  in_->tail.store(tail_, std::memory_order_release);
  return k;
}

void ShmStream::look(int fd) {
  // Only once the socket carries nothing more for this side: its pending bytes are read().
  if (in_->moved.load(std::memory_order_acquire) == 0 ||
      socket_read_ != in_->socket.load(std::memory_order_acquire))
    return;
  const live::TimeNs now = live::nowNs();
  if (now - last_look_ < kLook) return;
  last_look_ = now;
  char c = 0;
  if (recvSome(fd, &c, 1) > 0)
    throw PluginError(Errc::Remote,
                      "real peer wrote to the socket after its stream moved to shared memory");
}

}  // namespace crystal::plugin
