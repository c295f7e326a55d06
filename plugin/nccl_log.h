// Routes crystal's log lines into NCCL's logger, so they appear in NCCL_DEBUG output under
// the NET subsystem (or TUNING inside tuner entry points).
#pragma once

#include "crystal/nccl/common.h"

namespace crystal::plugin {

// Installs NCCL's logger as the sink of crystal::log (first non-null logger wins; later
// calls with another logger replace it, NCCL passes the same one every time).
void installNcclLogger(nccl::ncclDebugLogger_t logger) noexcept;

// While alive, lines of this thread are logged under `subsys` (nccl::kSubsys*).
class LogSubsystem {
 public:
  explicit LogSubsystem(unsigned long subsys) noexcept;
  ~LogSubsystem();
  LogSubsystem(const LogSubsystem&) = delete;
  LogSubsystem& operator=(const LogSubsystem&) = delete;

 private:
  unsigned long saved_;
};

}  // namespace crystal::plugin
