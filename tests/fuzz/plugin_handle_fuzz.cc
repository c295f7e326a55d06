// libFuzzer: decode of NCCL handle bytes (128) and of the Hello (40) that opens a stream to
// a listener. Any input must decode or raise PluginError; never crash or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "connection.h"
#include "errors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace crystal;
  std::uint8_t handle[live::kNcclHandleSize] = {};
  std::memcpy(handle, data, std::min(size, sizeof handle));
  std::uint32_t listen_id = 1;
  try {
    const live::NetHandle h = plugin::decodeOrThrow(handle);
    if (h.magic != live::kHandleMagic || h.version != live::kWireVersion) std::abort();
    if (h.kind != live::HandleKind::RealListen && h.kind != live::HandleKind::VirtualPeer)
      std::abort();
    listen_id = h.listen_id;
  } catch (const plugin::PluginError&) {
  }
  if (size <= sizeof handle) return 0;
  live::Hello hello;
  std::memcpy(&hello, data + sizeof handle, std::min(size - sizeof handle, sizeof hello));
  plugin::ListenComm lc(nullptr, 0, plugin::Fd(), listen_id, 0);
  try {
    plugin::checkHello(lc, hello);
    if (hello.listen_id != listen_id || hello.magic != live::kHandleMagic) std::abort();
  } catch (const plugin::PluginError&) {
  }
  return 0;
}
