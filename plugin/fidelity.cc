#include "fidelity.h"

#include <atomic>
#include <cstdio>

namespace crystal::plugin {
namespace {
std::atomic<FidelitySink> g_sink{nullptr};
}  // namespace

void setFidelitySink(FidelitySink sink) noexcept { g_sink.store(sink, std::memory_order_release); }

void reportNotFaithful(const std::string& text) noexcept {
  std::fprintf(stderr, "crystal: %s\n", text.c_str());
  if (const FidelitySink sink = g_sink.load(std::memory_order_acquire)) sink(text);
}

}  // namespace crystal::plugin
