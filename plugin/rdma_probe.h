// Runtime detection of an RDMA device (libibverbs, loaded with dlopen so the plugin runs
// where the library is absent). Real<->real transfers use TCP unless a device exists; the
// RC transport itself is not part of this build, so a found device is reported and TCP is
// still used.
#pragma once

#include <string>

namespace crystal::plugin {

struct RdmaProbe {
  bool library = false;  // libibverbs could be loaded
  int devices = 0;       // ibv_get_device_list count
  std::string first;     // name of the first device
};

[[nodiscard]] RdmaProbe probeRdma() noexcept;

}  // namespace crystal::plugin
