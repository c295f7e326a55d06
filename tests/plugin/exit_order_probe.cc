// Stands in for NCCL's proxy thread calling into the plugin while the program exits (a
// program that leaves on an NCCL error without destroying its communicators): a handler
// registered with atexit before the plugin's singletons exist runs after every static
// destructor registered later, so it sees what such a thread would see then.
#include <cstdio>
#include <cstdlib>

#include "cuda_driver.h"
#include "handle_table.h"
#include "state.h"

namespace {

using crystal::plugin::HandleTable;
using crystal::plugin::PluginState;

void callIn() {
  PluginState& s = PluginState::get();
  s.setCommRingsOnNode(2);
  if (!s.ringsOnNode(2)) std::abort();
  if (HandleTable::instance().find(reinterpret_cast<const void*>(0x100000001)) != nullptr)
    std::abort();
  try {
    (void)crystal::plugin::cuda::driver();  // loads libcuda.so.1, or remembers why it could not
  } catch (const std::exception&) {
  }
}

}  // namespace

int main() {
  std::atexit([] {
    callIn();
    std::puts("exit_order_probe: the plugin answered after static destruction");
  });
  callIn();
  return 0;
}
