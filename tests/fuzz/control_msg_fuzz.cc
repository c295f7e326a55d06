// libFuzzer target: the control-frame decoder (include/crystal/control/codec.h) on arbitrary
// bytes. Any input must either decode or throw ProtocolError; a decoded message must encode
// back to the same frame bytes when its texts fit their limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "crystal/control/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace crystal::control;
  const std::span<const std::uint8_t> in(data, size);
  try {
    const Header h = decodeHeader(in);
    if (in.size() < kHeaderSize + h.length) return 0;
    const Message m = decodePayload(h.type, in.subspan(kHeaderSize, h.length));
    const auto again = encode(m);
    if (again.size() != kHeaderSize + h.length ||
        !std::equal(again.begin(), again.end(), in.begin()))
      std::abort();  // decode and encode disagree
  } catch (const crystal::ProtocolError&) {
  }
  return 0;
}
