// Minimal levelled logging for the CLI and the host. The plugin routes the same calls to
// NCCL's logger (plugin/log), so a user sees crystal's lines inside NCCL_DEBUG output.
#pragma once

#include <fmt/core.h>

#include <string_view>

namespace crystal::log {

enum class Level : int { Error = 0, Warn = 1, Info = 2, Debug = 3 };

// Where lines go. Default: stderr, with "crystal: " prefix. The plugin installs a sink that
// forwards to ncclDebugLogger_t.
using Sink = void (*)(Level, std::string_view file, int line, std::string_view msg);
void setSink(Sink sink) noexcept;
void setLevel(Level level) noexcept;  // lines above this level are dropped
Level level() noexcept;
void write(Level lvl, std::string_view file, int line, std::string_view msg) noexcept;

template <typename... Args>
void logf(Level lvl, const char* file, int line, fmt::format_string<Args...> f, Args&&... args) {
  if (static_cast<int>(lvl) > static_cast<int>(level())) return;
  write(lvl, file, line, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace crystal::log

#define CRYSTAL_ERROR(...) ::crystal::log::logf(::crystal::log::Level::Error, __FILE__, __LINE__, __VA_ARGS__)
#define CRYSTAL_WARN(...) ::crystal::log::logf(::crystal::log::Level::Warn, __FILE__, __LINE__, __VA_ARGS__)
#define CRYSTAL_INFO(...) ::crystal::log::logf(::crystal::log::Level::Info, __FILE__, __LINE__, __VA_ARGS__)
#define CRYSTAL_DEBUG(...) ::crystal::log::logf(::crystal::log::Level::Debug, __FILE__, __LINE__, __VA_ARGS__)
