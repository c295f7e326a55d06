// libFuzzer target: the host's decoders of NCCL 2.28.9 bootstrap bytes (replay/host/wire.h)
// and the virtual-slice synthesis fed from decoded "real" slices. Every input must decode or
// throw crystal::ProtocolError; a parsed bootstrap message must lie inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "../../replay/host/net.h"
#include "../../replay/host/virtual_slices.h"
#include "../../replay/host/wire.h"
#include "crystal/base/error.h"
#include "crystal/live/handle.h"

namespace w = crystal::host::wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto in = std::as_bytes(std::span(data + 1, size - 1));
  try {
    switch (data[0] % 8) {
      case 0: {
        const auto hs = w::decodeHandshake(in);
        (void)hs;
        const auto msg = w::tryParseBootstrapMessage(in.subspan(w::kHandshakeBytes));
        if (msg && msg->consumed > in.size() - w::kHandshakeBytes) std::abort();
        break;
      }
      case 1: {
        const auto msg = w::tryParseBootstrapMessage(in);
        if (msg && (msg->consumed > in.size() || msg->payload.size() > msg->consumed)) std::abort();
        break;
      }
      case 2: {
        const auto info = w::decodeExact<w::ExtInfo>(in, "extInfo");
        sockaddr_storage ss{};
        (void)info.listen_root_address.toSockaddr(ss);
        (void)info.connect_info.addr().str();
        break;
      }
      case 3: {
        const auto p = w::decodeExact<w::PeerInfo>(in, "peerInfo");
        const auto v = crystal::host::virtualPeerInfo({1, 2, 3, 8, 4}, p);
        if (v.version != 22809 || v.cuda_comp_cap != p.cuda_comp_cap) std::abort();
        break;
      }
      case 4: {
        const auto g = w::decodeExact<w::AllGatherInfo>(in, "allGatherInfo");
        const auto v = crystal::host::virtualGraphInfo({1, 5, 8, 8, 4}, g);
        if (v.topo_ranks.ring_recv[63] != 5) std::abort();
        break;
      }
      case 5: {
        for (const auto& e : w::decodeConnectEntries(in)) {
          crystal::live::NetHandle h;
          (void)crystal::live::decodeHandle(e.bytes, h);
          (void)e.useGdr();
        }
        break;
      }
      case 6: {
        if (in.size() < 8) break;
        std::int32_t tag = 0, n = 0;
        std::memcpy(&tag, in.data(), 4);
        std::memcpy(&n, in.data() + 4, 4);
        w::SetupTag t;
        if (w::decodeSetupTag(tag, n, t) && (t.distance < 1 || t.distance >= n || t.graph > 5))
          std::abort();
        (void)crystal::host::classifyAllGather(static_cast<int>(tag & 7), n, 64);
        break;
      }
      default: {
        const auto r = w::decodeExact<w::RingData>(in, "ringData");
        (void)crystal::host::aliasRank(r.peer_address);
        (void)r.peer_proxy.str();
        break;
      }
    }
  } catch (const crystal::ProtocolError&) {
  }
  return 0;
}
