// Connection set-up: listen comms (a TCP data listener per listen(), named in a RealListen
// handle) and connects in progress. accept() turns a listener's first stream into a recv
// comm: real if the Hello says PeerKind::Real, virtual if the emulation host (or a test)
// opened it for a virtual sender.
#pragma once

#include <cstdint>

#include "comm.h"
#include "crystal/live/handle.h"
#include "socket.h"

namespace crystal::plugin {

class ListenComm final : public Comm {
 public:
  ListenComm(NetContext* ctx, int dev, Fd fd, std::uint32_t listen_id, std::uint64_t comm_id)
      : Comm(CommKind::Listen, ctx, dev), fd(std::move(fd)), listen_id(listen_id),
        comm_id(comm_id) {}
  Fd fd;
  std::uint32_t listen_id;
  std::uint64_t comm_id;
  Fd pending;  // accepted stream whose Hello is still arriving
  live::Hello hello;
  std::size_t hello_got = 0;
};

class PendingConnect final : public Comm {
 public:
  PendingConnect(NetContext* ctx, int dev, Fd fd, const live::Hello& h)
      : Comm(CommKind::PendingConnect, ctx, dev), fd(std::move(fd)), hello(h) {}
  Fd fd;
  live::Hello hello;
  bool connected = false;
  std::size_t hello_sent = 0;
};

// Fills `h` and returns a new listen comm (throws on socket failure).
[[nodiscard]] std::unique_ptr<ListenComm> makeListen(NetContext* ctx, int dev,
                                                     live::NetHandle& h);
// Decodes NCCL's handle bytes; throws BadArgument naming the offending field.
[[nodiscard]] live::NetHandle decodeOrThrow(const void* bytes);
// Validates a Hello that opened a stream to `lc`; throws Remote/BadArgument if foreign.
void checkHello(const ListenComm& lc, const live::Hello& h);

}  // namespace crystal::plugin
