// Handing a file descriptor to another process of this machine: a CUDA allocation exported
// as a POSIX fd (real_comm.h "GPU to GPU"). Like NCCL's own proxy, through a Unix datagram
// socket in the abstract namespace with the fd as SCM_RIGHTS ancillary data; the bytes
// between the two real ranks keep flowing on their TCP stream, which says what was sent.
//
// Each process has one inbox, bound on first use as "\0crystal-fd-<16 hex>" (its token, 64
// random bits). A sender addresses a note to a token; the note's key says which connection
// and which of its buffers the fd maps. The receiving comm takes its note by key; notes of
// other comms read on the way are kept for them. Nothing here blocks: a full inbox (Linux
// queues max_dgram_qlen datagrams, 10 by default) answers Again and the sender retries.
#pragma once

#include <cstdint>
#include <string>

#include "socket.h"

namespace crystal::plugin {

class FdInbox {
 public:
  // The process's inbox; throws PluginError(System) when the socket cannot be bound.
  [[nodiscard]] static FdInbox& get();
  [[nodiscard]] std::uint64_t token() const noexcept { return token_; }
  // The fd sent under `key`, once it has arrived (an invalid Fd until then). Each is
  // delivered once.
  [[nodiscard]] Fd take(std::uint64_t key);

  FdInbox(const FdInbox&) = delete;
  FdInbox& operator=(const FdInbox&) = delete;

 private:
  FdInbox();
  ~FdInbox() = default;
  struct Impl;
  Impl* impl_;
  std::uint64_t token_ = 0;
};

enum class FdSend { Sent, Again, Failed };
// Sends `fd` under `key` to the inbox `token`. Failed (with *why) where no such inbox exists
// on this machine, i.e. the peer runs elsewhere.
[[nodiscard]] FdSend sendFd(std::uint64_t token, std::uint64_t key, int fd, std::string* why);

}  // namespace crystal::plugin
