#include "ring_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

#include "comm.h"
#include "crystal/live/handle.h"
#include "handle_table.h"
#include "net_api.h"

namespace crystal::test {
namespace {

using plugin::DataComm;
using plugin::Request;

// NCCL_STEPS = 8 slots per connection, a Simple ring slice is sliceSteps = 2 of them, a ring
// step (chunk) chunkSteps = 4: 4 slices in flight, 2 slices per step; stepSize 512 KiB.
constexpr int kSlicesInFlight = 4;
constexpr int kSlicesPerStep = 2;
constexpr double kChunkBytes = 4.0 * (4 << 20) / 8;

int openHello(const live::NetHandle& h, const ConnId& id) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = h.port;
  std::memcpy(&sin.sin_addr, h.addr, 4);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) {
    ADD_FAILURE() << "cannot connect to the plugin's listener";
    if (fd >= 0) ::close(fd);
    return -1;
  }
  live::Hello hello;
  hello.peer = live::PeerKind::Virtual;
  hello.listen_id = h.listen_id;
  hello.comm_id = h.comm_id;
  hello.sender_rank = id.peer;
  hello.receiver_rank = id.self;
  hello.nranks = id.nranks;
  hello.distance = id.distance;
  hello.ordinal = static_cast<std::uint16_t>(id.ordinal);
  hello.graph = static_cast<std::uint8_t>(id.graph);
  EXPECT_EQ(::send(fd, &hello, sizeof hello, 0), static_cast<ssize_t>(sizeof hello));
  return fd;
}

DataComm& dataComm(void* token) {
  auto* c = plugin::HandleTable::instance().find(token);
  EXPECT_NE(c, nullptr);
  return static_cast<DataComm&>(*c);
}

// Per-channel state of the proxy + GPU emulation.
struct ChannelRun {
  DataComm* send = nullptr;
  DataComm* recv = nullptr;
  std::deque<Request*> sends, recvs;  // outstanding, oldest first (NCCL tests in order)
  long sent = 0, send_done = 0, posted = 0, received = 0, consumed = 0;
  std::vector<live::TimeNs> received_at;  // [slice]: its receive completed
};

}  // namespace

void* connectVirtual(void* ctx, int dev, const ConnId& id) {
  live::NetHandle h;
  h.kind = live::HandleKind::VirtualPeer;
  h.comm_id = id.comm_id;
  h.rank = id.peer;
  h.nranks = id.nranks;
  h.self_rank = id.self;
  h.distance = id.distance;
  h.ordinal = static_cast<std::uint16_t>(id.ordinal);
  h.graph = static_cast<std::uint8_t>(id.graph);
  char bytes[live::kNcclHandleSize];
  std::memcpy(bytes, &h, sizeof h);
  void* send = nullptr;
  EXPECT_EQ(plugin::net::connect(ctx, dev, bytes, &send, nullptr), nccl::ncclSuccess);
  EXPECT_NE(send, nullptr);
  return send;
}

void* acceptVirtual(void* ctx, int dev, const ConnId& id, void** listen, int* host_fd) {
  char bytes[live::kNcclHandleSize] = {};
  EXPECT_EQ(plugin::net::listen(ctx, dev, bytes, listen), nccl::ncclSuccess);
  live::NetHandle h;
  EXPECT_TRUE(live::decodeHandle(bytes, h));
  *host_fd = openHello(h, id);
  void* recv = nullptr;
  for (int i = 0; i < 1'000'000 && !recv; ++i)
    EXPECT_EQ(plugin::net::accept(*listen, &recv, nullptr), nccl::ncclSuccess);
  EXPECT_NE(recv, nullptr);
  return recv;
}

void closeConns(std::vector<RingConns>& conns) {
  for (RingConns& c : conns) {
    if (c.send) {
      EXPECT_EQ(plugin::net::closeSend(c.send), nccl::ncclSuccess);
    }
    if (c.recv) {
      EXPECT_EQ(plugin::net::closeRecv(c.recv), nccl::ncclSuccess);
    }
    if (c.listen) {
      EXPECT_EQ(plugin::net::closeListen(c.listen), nccl::ncclSuccess);
    }
    if (c.host_fd >= 0) ::close(c.host_fd);
    c = RingConns{};
  }
}

void advanceClock(live::TimeNs& now, live::TimeNs next, long& unknown_waits) {
  if (next == Request::kUnknown) {
    ++unknown_waits;
    now += 1000;
  } else {
    now = std::max(now + 1, next);
  }
}

namespace {
// calcCollChunking as the model reads it (replay/model/steps.cc ringRun): loops of nranks
// chunks of at most 4 steps per channel, 2 slices per chunk.
struct RingChunking {
  long loops;
  double chunk;   // data bytes of one ring step per channel
  int steps;      // ring steps per loop
  long per_loop;  // requests per loop
};
RingChunking ringChunking(model::Func f, std::uint64_t bytes, int nch, int nranks) {
  const double per_channel = static_cast<double>(bytes) / nch;
  const long loops =
      std::max<long>(1, static_cast<long>(std::ceil(per_channel / (nranks * kChunkBytes))));
  const int steps = f == model::Func::AllReduce ? 2 * (nranks - 1) : nranks - 1;
  return {loops, per_channel / (static_cast<double>(nranks) * loops), steps,
          static_cast<long>(steps) * kSlicesPerStep};
}
}  // namespace

long ringUnits(model::Func f, std::uint64_t bytes, int nch, int nranks) {
  const RingChunking k = ringChunking(f, bytes, nch, nranks);
  return k.loops * k.per_loop;
}

RingRun runRingCollective(std::vector<RingConns>& conns, model::Func f, std::uint64_t bytes,
                          int nranks, live::TimeNs start, Turnaround turnaround) {
  const int nch = static_cast<int>(conns.size());
  const RingChunking k = ringChunking(f, bytes, nch, nranks);
  const auto slice =
      static_cast<std::size_t>(std::max(1.0, std::round(k.chunk / kSlicesPerStep)));
  const int steps = k.steps;
  const long per_loop = k.per_loop;
  const long units = k.loops * per_loop;
  auto stepOf = [&](long u) { return (u % per_loop) / kSlicesPerStep; };

  static char buffer[8];  // the plugin never touches data for virtual peers without regMr
  std::vector<ChannelRun> ch(static_cast<std::size_t>(nch));
  for (int c = 0; c < nch; ++c) {
    ch[c].send = &dataComm(conns[c].send);
    ch[c].recv = &dataComm(conns[c].recv);
    ch[c].received_at.assign(static_cast<std::size_t>(units), 0);
  }
  // When the GPU may send slice v: its data ready plus the turnaround; kUnknown: not yet.
  auto sendReady = [&](const ChannelRun& c, long v) {
    if (stepOf(v) == 0) return start + turnaround.send_ns;
    if (c.received <= v - kSlicesPerStep) return Request::kUnknown;
    return c.received_at[static_cast<std::size_t>(v - kSlicesPerStep)] + turnaround.send_ns;
  };
  auto consumeReady = [&](const ChannelRun& c, long v) {
    return c.received_at[static_cast<std::size_t>(v)] + turnaround.consume_ns;
  };
  RingRun out;
  out.start = start;
  live::TimeNs now = start;
  long finished = 0;
  while (finished < nch) {
    bool progress = true;
    while (progress) {
      progress = false;
      finished = 0;
      for (ChannelRun& c : ch) {
        // Completions, oldest first.
        while (!c.recvs.empty() && c.recv->test(*c.recvs.front(), now, nullptr)) {
          c.recv->freeRequest(*c.recvs.front());
          c.recvs.pop_front();
          c.received_at[static_cast<std::size_t>(c.received)] = now;
          ++c.received;
          progress = true;
        }
        while (!c.sends.empty() && c.send->test(*c.sends.front(), now, nullptr)) {
          c.send->freeRequest(*c.sends.front());
          c.sends.pop_front();
          ++c.send_done;
          progress = true;
        }
        // The GPU consumes a received slice at once; one it forwards needs its send slot.
        while (c.consumed < c.received) {
          const long v = c.consumed;
          const bool forwarded = stepOf(v) < steps - 1;
          if (forwarded && c.sent <= v + kSlicesPerStep) break;
          if (now < consumeReady(c, v)) break;
          ++c.consumed;
          progress = true;
        }
        // Receives: a slot is reposted once the GPU consumed the slice it held.
        while (c.posted < units && c.posted < c.consumed + kSlicesInFlight) {
          Request* r = c.recv->allocRequest();
          EXPECT_NE(r, nullptr);
          if (!r) break;
          void* data = buffer;
          const std::size_t cap = slice;
          c.recv->irecv(*r, 1, &data, &cap, nullptr, now);
          c.recvs.push_back(r);
          ++c.posted;
          progress = true;
        }
        // Sends: data ready (first step of a loop, or the slice received a step earlier)
        // and a free send slot (head credit of the slice 4 back).
        while (c.sent < units && c.sent < c.send_done + kSlicesInFlight &&
               now >= sendReady(c, c.sent)) {
          Request* r = c.send->allocRequest();
          EXPECT_NE(r, nullptr);
          if (!r) break;
          c.send->isend(*r, buffer, slice, 0, now);
          c.sends.push_back(r);
          ++c.sent;
          ++out.requests;
          progress = true;
        }
        if (c.send_done == units && c.received == units) ++finished;
      }
    }
    if (finished == nch) break;
    // Next event: the earliest known completion of an oldest outstanding request.
    live::TimeNs next = Request::kUnknown;
    for (ChannelRun& c : ch) {
      if (!c.recvs.empty()) next = std::min(next, c.recvs.front()->due);
      if (!c.sends.empty()) next = std::min(next, c.sends.front()->due);
      // The GPU's next own action (a turnaround running out).
      if (c.consumed < c.received && consumeReady(c, c.consumed) > now)
        next = std::min(next, consumeReady(c, c.consumed));
      if (c.sent < units && c.sent < c.send_done + kSlicesInFlight &&
          sendReady(c, c.sent) != Request::kUnknown && sendReady(c, c.sent) > now)
        next = std::min(next, sendReady(c, c.sent));
    }
    advanceClock(now, next, out.unknown_waits);
  }
  out.end = now;
  return out;
}

}  // namespace crystal::test
