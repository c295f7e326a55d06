// The one translation from internal failures to ncclResult_t, and the guard every ABI entry
// point runs its body in: nothing may throw into NCCL, every failure is logged once with
// the entry point's name and returned as an NCCL error code.
#pragma once

#include <stdexcept>
#include <string>

#include "crystal/nccl/common.h"

namespace crystal::plugin {

enum class Errc {
  BadArgument,  // a value NCCL passed is wrong (bad handle bytes, oversized send, ...)
  BadUsage,     // call order/state is wrong (use after close, unknown comm or request)
  System,       // the OS refused (socket, memory)
  Remote,       // the peer broke the protocol or went away
  Internal,     // our own invariant failed
};

class PluginError : public std::runtime_error {
 public:
  PluginError(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

[[nodiscard]] nccl::ncclResult_t toNccl(Errc e) noexcept;

// Logs the in-flight exception (called from a catch block) and maps it.
[[nodiscard]] nccl::ncclResult_t currentExceptionToNccl(const char* entry) noexcept;

template <typename F>
[[nodiscard]] nccl::ncclResult_t guard(const char* entry, F&& body) noexcept {
  try {
    body();
    return nccl::ncclSuccess;
  } catch (...) {
    return currentExceptionToNccl(entry);
  }
}

}  // namespace crystal::plugin
