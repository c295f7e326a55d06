#include "handle_table.h"

#include "errors.h"

namespace crystal::plugin {
namespace {
constexpr std::uint32_t kGenMask = 0x7fff;  // keeps tokens below 2^47 (user-space range)

std::uintptr_t encode(std::uint32_t index, std::uint32_t gen) {
  return (static_cast<std::uintptr_t>(gen) << 32) | (index + 1);
}
}  // namespace

HandleTable& HandleTable::instance() {
  // Never destroyed: NCCL's proxy thread tests requests until the process is gone, also while
  // exit() runs static destructors; and a comm destroyed at exit would free GPU memory after
  // the CUDA driver's own teardown.
  static auto* table = new HandleTable;
  return *table;
}

HandleTable::HandleTable() : slots_(std::make_unique<Slot[]>(kCapacity)) {}

void* HandleTable::insert(std::unique_ptr<Comm> comm) {
  std::lock_guard lock(mu_);
  std::uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else if (next_ < kCapacity) {
    index = next_++;
  } else {
    throw PluginError(Errc::System, "too many open comms (limit 262144)");
  }
  Slot& s = slots_[index];
  s.comm.store(comm.release(), std::memory_order_release);
  ++live_;
  return reinterpret_cast<void*>(encode(index, s.gen.load(std::memory_order_relaxed)));
}

Comm* HandleTable::find(const void* token) const noexcept {
  const auto v = reinterpret_cast<std::uintptr_t>(token);
  const std::uint32_t index = static_cast<std::uint32_t>(v & 0xfffff) - 1;
  if ((v & 0xfffff) == 0 || index >= kCapacity || (v >> 20 & 0xfff) != 0) return nullptr;
  const Slot& s = slots_[index];
  if ((v >> 32) != s.gen.load(std::memory_order_acquire)) return nullptr;
  return s.comm.load(std::memory_order_acquire);
}

std::unique_ptr<Comm> HandleTable::remove(const void* token) {
  std::lock_guard lock(mu_);
  Comm* c = find(token);
  if (!c) return nullptr;
  const auto index = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(token) & 0xfffff) - 1;
  Slot& s = slots_[index];
  std::uint32_t gen = (s.gen.load(std::memory_order_relaxed) + 1) & kGenMask;
  s.gen.store(gen == 0 ? 1 : gen, std::memory_order_release);
  s.comm.store(nullptr, std::memory_order_release);
  free_.push_back(index);
  --live_;
  return std::unique_ptr<Comm>(c);
}

std::size_t HandleTable::live() const {
  std::lock_guard lock(mu_);
  return live_;
}

}  // namespace crystal::plugin
