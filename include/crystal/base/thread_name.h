// Names the calling thread as `top -H`, `ps -L`, gdb, perf and /proc/PID/task/TID/comm show it.
// The plugin's threads live inside someone's training process beside NCCL's own ("NCCL
// Progress", with NCCL_SET_THREAD_NAME=1): a name that says "crystal" and what the thread does
// is how a user (or tests/gpu/hybrid/thread_sample.py) tells them apart.
#pragma once

#include <string>
#include <string_view>

namespace crystal {

// Linux keeps 15 bytes of a thread's name; longer names are cut there. Never fails: a thread
// without its name still runs (the call's error, if any, is dropped).
void nameThisThread(std::string_view name) noexcept;

// The calling thread's name as the kernel holds it ("" where it cannot be read).
[[nodiscard]] std::string thisThreadName();

}  // namespace crystal
