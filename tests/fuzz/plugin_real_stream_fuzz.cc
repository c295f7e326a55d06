// libFuzzer: the byte stream a real peer writes into a receive comm (frames: data, shared-
// memory offers and data, GPU allocation offers, fd notices and data; plugin/real_comm.h),
// with two receives of host buffers posted, and the same bytes as the replies a send comm
// reads (offer answers, acknowledgements). Any input must fill receives or raise PluginError:
// never crash, never touch memory outside the buffers, never block (the stream ends after the
// input; test() is called a bounded number of times). Offers name segments that do not exist
// (or are refused by their form), and no fd ever reaches the process's inbox, so shared-memory
// and GPU-to-GPU data fail with a clear error.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <vector>

#include "errors.h"
#include "real_comm.h"

namespace {

using namespace crystal;

constexpr std::size_t kMaxInput = 32 << 10;  // fits a socketpair's buffer: the write never blocks
constexpr live::TimeNs kLate = live::TimeNs{1} << 60;  // every modelled time has passed
constexpr live::TimeNs kNever = std::numeric_limits<live::TimeNs>::max();  // no stall warning

// A socketpair: [0] the comm's (non-blocking), [1] the peer's, written and shut after `bytes`.
bool peerStream(const std::uint8_t* data, std::size_t size, int fds[2]) {
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return false;
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fds[1], data + done, size - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::shutdown(fds[1], SHUT_WR);
  return true;
}

void receive(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (!peerStream(data, size, fds)) return;
  plugin::Fd peer(fds[1]);
  plugin::RealRecvComm rc(nullptr, 0, 8, plugin::Fd(fds[0]), live::LinkParams{}, true, "fuzz",
                          kNever);
  std::vector<char> buf(16 << 10);
  try {
    (void)rc.regMr(buf.data(), buf.size(), nccl::NCCL_PTR_HOST);
    std::vector<plugin::Request*> reqs;
    for (int tag = 0; tag < 2; ++tag) {
      plugin::Request* r = rc.allocRequest();
      if (!r) std::abort();
      void* p = buf.data() + static_cast<std::size_t>(tag) * (8 << 10);
      std::size_t bytes = 8 << 10;
      rc.irecv(*r, 1, &p, &bytes, &tag, 0);
      reqs.push_back(r);
    }
    for (int round = 0; round < 64; ++round)
      for (plugin::Request* r : reqs) {
        int sizes[plugin::kMaxGroup] = {};
        if (r->in_use && rc.test(*r, kLate, sizes)) {
          if (sizes[0] < 0 || sizes[0] > (8 << 10)) std::abort();
          rc.freeRequest(*r);
        }
      }
  } catch (const plugin::PluginError&) {
  }
}

void send(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (!peerStream(data, size, fds)) return;
  plugin::Fd peer(fds[1]);
  plugin::RealSendComm sc(nullptr, 0, 8, plugin::Fd(fds[0]), live::LinkParams{},
                          std::make_shared<live::PortQueue>(), "fuzz", kNever, true);
  std::vector<char> buf(4096, 7);
  try {
    (void)sc.regMr(buf.data(), buf.size(), nccl::NCCL_PTR_HOST);
    plugin::Request* r = sc.allocRequest();
    if (!r) std::abort();
    sc.isend(*r, buf.data(), buf.size(), 0, 0);
    for (int round = 0; round < 64; ++round) (void)sc.test(*r, kLate, nullptr);
  } catch (const plugin::PluginError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInput) size = kMaxInput;
  receive(data, size);
  send(data, size);
  return 0;
}
