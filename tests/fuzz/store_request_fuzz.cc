// libFuzzer: arbitrary bytes as one TCPStore connection's stream. The parser must return
// Complete/NeedMore/Invalid without reading out of bounds, and the store core must survive
// any sequence of parsed requests (including WAIT/CANCEL_WAIT interleavings and timeouts).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "replay/store/store_core.h"
#include "replay/store/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace crystal::store;
  const auto bytes = std::as_bytes(std::span(data, size));
  const Limits limits{.max_key_bytes = 256, .max_value_bytes = 4096, .max_keys = 64};
  StoreCore core(
      VirtualRanks(JobView{.world_size = 64, .real_ranks = {0, 32}}),
      [] { return std::string(128, 'M'); }, CoreOptions{std::chrono::milliseconds(5)});
  // Two connections share the state: even bytes go to one, the stream is split at a byte.
  const std::size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  Clock::time_point now{};
  for (ConnId conn : {ConnId{1}, ConnId{2}}) core.open(conn, now);
  for (ConnId conn : {ConnId{1}, ConnId{2}}) {
    auto rest = conn == 1 ? bytes.subspan(0, cut) : bytes.subspan(cut);
    while (!rest.empty()) {
      const ParseResult r = parseRequest(rest, limits);
      if (r.status != ParseStatus::Complete) {
        if (r.status == ParseStatus::Invalid) {
          Effects fx;
          core.malformed(conn, r.error, fx);
        }
        break;
      }
      if (r.consumed == 0 || r.consumed > rest.size()) __builtin_trap();
      Effects fx;
      core.request(conn, r.request, now, fx);
      now += std::chrono::milliseconds(1);
      core.tick(now, fx);
      rest = rest.subspan(r.consumed);
    }
  }
  return 0;
}
