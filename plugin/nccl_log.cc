#include "nccl_log.h"

#include <atomic>
#include <string>

#include "crystal/base/log.h"

namespace crystal::plugin {
namespace {

std::atomic<nccl::ncclDebugLogger_t> g_logger{nullptr};
thread_local unsigned long t_subsys = nccl::kSubsysNet;

void sink(log::Level lvl, std::string_view file, int line, std::string_view msg) {
  nccl::ncclDebugLogger_t logger = g_logger.load(std::memory_order_acquire);
  if (!logger) return;
  const nccl::ncclDebugLogLevel level = lvl == log::Level::Error || lvl == log::Level::Warn
                                            ? nccl::NCCL_LOG_WARN
                                        : lvl == log::Level::Info ? nccl::NCCL_LOG_INFO
                                                                  : nccl::NCCL_LOG_TRACE;
  const std::string f(file);
  const std::string m(msg);
  logger(level, t_subsys, f.c_str(), line, "crystal: %s", m.c_str());
}

}  // namespace

void installNcclLogger(nccl::ncclDebugLogger_t logger) noexcept {
  if (!logger) return;
  g_logger.store(logger, std::memory_order_release);
  log::setSink(&sink);
  // NCCL filters by NCCL_DEBUG itself; hand it everything up to info.
  log::setLevel(log::Level::Info);
}

LogSubsystem::LogSubsystem(unsigned long subsys) noexcept : saved_(t_subsys) { t_subsys = subsys; }
LogSubsystem::~LogSubsystem() { t_subsys = saved_; }

}  // namespace crystal::plugin
