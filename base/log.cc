#include "crystal/base/log.h"

#include <atomic>
#include <cstdio>

namespace crystal::log {
namespace {

void stderrSink(Level lvl, std::string_view /*file*/, int /*line*/, std::string_view msg) {
  static constexpr const char* kTag[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "crystal %s: %.*s\n", kTag[static_cast<int>(lvl)],
               static_cast<int>(msg.size()), msg.data());
}

std::atomic<Sink> gSink{&stderrSink};
std::atomic<int> gLevel{static_cast<int>(Level::Warn)};

}  // namespace

void setSink(Sink sink) noexcept { gSink.store(sink ? sink : &stderrSink); }
void setLevel(Level lvl) noexcept { gLevel.store(static_cast<int>(lvl)); }
Level level() noexcept { return static_cast<Level>(gLevel.load(std::memory_order_relaxed)); }
void write(Level lvl, std::string_view file, int line, std::string_view msg) noexcept {
  gSink.load()(lvl, file, line, msg);
}

}  // namespace crystal::log
