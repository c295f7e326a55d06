// Fuzzes the check of NCCL_PROTO / NCCL_P2P_LL_THRESHOLD under emulation.p2p_peers
// (plugin/p2p_protocol.h): any two strings (split at the first NUL; the second may be absent).
// Invariants: no crash or out-of-bounds read (ASan); an answer "nothing lets LL run" only for
// a protocol list that names no LL/LL128 enablement, i.e. never for an unset or empty
// NCCL_PROTO and never for a positive threshold.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "plugin/p2p_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const auto nul = all.find('\0');
  const std::string proto = all.substr(0, nul);
  const bool has_threshold = nul != std::string::npos;
  const std::string threshold = has_threshold ? all.substr(nul + 1) : std::string();
  const char* t = has_threshold ? threshold.c_str() : nullptr;
  const auto why = crystal::plugin::p2pProtocolProblem(proto.c_str(), t);
  if (!why) {
    if (proto.empty()) std::abort();  // unset: NCCL may pick LL
    if (t == nullptr) std::abort();   // 16384 by default
    char* end = nullptr;
    const long long v = std::strtoll(t, &end, 10);
    if (v > 0) std::abort();
  } else if (why->empty()) {
    std::abort();  // a reason is always said
  }
  if (crystal::plugin::p2pProtocolProblem(nullptr, t) == std::nullopt) std::abort();
  return 0;
}
