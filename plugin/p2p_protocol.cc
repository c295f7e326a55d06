#include "p2p_protocol.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>

namespace crystal::plugin {

namespace {
// NCCL_PROTO's element list ("LL,Simple", "^LL128"): whether it enables LL or LL128.
bool listAllowsLowLatency(std::string_view list) {
  const bool except = !list.empty() && list.front() == '^';
  if (except) list.remove_prefix(1);
  bool ll = false, ll128 = false;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view e = list.substr(0, comma);
    const auto is = [&](std::string_view name) {
      return e.size() == name.size() &&
             std::equal(e.begin(), e.end(), name.begin(), [](char a, char b) {
               return std::tolower(static_cast<unsigned char>(a)) ==
                      std::tolower(static_cast<unsigned char>(b));
             });
    };
    ll |= is("LL");
    ll128 |= is("LL128");
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return except ? !(ll && ll128) : (ll || ll128);
}
}  // namespace

std::optional<std::string> p2pProtocolProblem(const char* nccl_proto,
                                              const char* p2p_ll_threshold) {
  // NCCL_PROTO: "[func:]list" entries separated by ';' (graph/tuning.cc parseList); any entry
  // that enables LL or LL128 for some function lets NCCL run it.
  if (nccl_proto == nullptr || *nccl_proto == '\0')
    return std::string("NCCL_PROTO is unset, so NCCL may run LL or LL128");
  for (std::string_view rest = nccl_proto; !rest.empty();) {
    const auto semi = rest.find(';');
    std::string_view entry = rest.substr(0, semi);
    if (const auto colon = entry.find(':'); colon != std::string_view::npos)
      entry.remove_prefix(colon + 1);
    if (listAllowsLowLatency(entry))
      return "NCCL_PROTO=" + std::string(nccl_proto) + " lets NCCL run LL or LL128";
    rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
  }
  const char* t = p2p_ll_threshold;
  char* end = nullptr;
  const long long threshold = t != nullptr && *t != '\0' ? std::strtoll(t, &end, 10) : 16384;
  if (t != nullptr && *t != '\0' && (end == t || *end != '\0'))
    return "NCCL_P2P_LL_THRESHOLD=" + std::string(t) + " is not a number";
  if (threshold > 0)
    return "NCCL_P2P_LL_THRESHOLD is " +
           (t != nullptr && *t != '\0' ? std::string(t) : std::string("unset (16384)")) +
           ", so NCCL sends and receives that small in LL";
  return std::nullopt;
}

}  // namespace crystal::plugin
