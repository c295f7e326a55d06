#include "connection.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include <fmt/core.h>

#include "errors.h"
#include "state.h"

namespace crystal::plugin {

std::unique_ptr<ListenComm> makeListen(NetContext* ctx, int dev, live::NetHandle& h) {
  static std::atomic<std::uint32_t> next_listen_id{1};
  PluginState& st = PluginState::get();
  SockAddr bound;
  Fd fd = listenTcp(st.socketAddr(), bound);
  h = live::NetHandle{};
  h.kind = live::HandleKind::RealListen;
  h.dev = static_cast<std::uint8_t>(dev);
  h.comm_id = ctx->comm_id;
  // The listener's rank, so the connecting real rank times the link between the two.
  const PluginState::CommRank self = st.commRank(ctx->comm_id);
  h.rank = self.rank;
  h.nranks = self.nranks;
  h.emulation = st.emulationId();
  h.listen_id = next_listen_id.fetch_add(1);
  h.pid = static_cast<std::uint32_t>(::getpid());
  h.port = bound.port_be;
  h.family = 4;
  std::memcpy(h.addr, bound.ip, 4);
  return std::make_unique<ListenComm>(ctx, dev, std::move(fd), h.listen_id, h.comm_id);
}

live::NetHandle decodeOrThrow(const void* bytes) {
  if (!bytes) throw PluginError(Errc::BadArgument, "null handle");
  live::NetHandle h;
  if (!live::decodeHandle(bytes, h))
    throw PluginError(Errc::BadArgument,
                      fmt::format("handle is not a crystal handle of wire version {} "
                                  "(magic {:#x} at offset 0, version {} at 4, kind {} at 6)",
                                  live::kWireVersion, h.magic, h.version,
                                  static_cast<int>(h.kind)));
  if (h.kind == live::HandleKind::RealListen && h.family != 4)
    throw PluginError(Errc::BadArgument,
                      fmt::format("RealListen handle: address family {} at offset 46 "
                                  "(only IPv4 is supported)", h.family));
  return h;
}

void checkHello(const ListenComm& lc, const live::Hello& h) {
  if (h.magic != live::kHandleMagic || h.version != live::kWireVersion)
    throw PluginError(Errc::Remote, fmt::format("stream to listen {} opened without a crystal "
                                                "Hello (magic {:#x}, version {})",
                                                lc.listen_id, h.magic, h.version));
  if (h.peer != live::PeerKind::Real && h.peer != live::PeerKind::Virtual)
    throw PluginError(Errc::Remote, fmt::format("Hello: peer kind {} at offset 6",
                                                static_cast<int>(h.peer)));
  if (h.listen_id != lc.listen_id)
    throw PluginError(Errc::Remote, fmt::format("Hello for listen {} reached listen {} (stale "
                                                "or foreign handle)", h.listen_id, lc.listen_id));
}

}  // namespace crystal::plugin
