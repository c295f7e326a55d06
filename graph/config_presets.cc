#include "graph/config_presets.h"

#include <fmt/core.h>

#include "crystal/base/error.h"

namespace crystal::graph {

ClusterConfig clusterPreset(const std::string& name, const std::string& field,
                            const std::string& file) {
  // config.h defaults are an H200 DGX node on 8x400 Gb/s rail-optimised InfiniBand.
  ClusterConfig c;
  if (name == "h200-dgx-ib") {
    c.name = "h200-dgx";
    return c;
  }
  if (name == "h100-dgx-ib") {
    c.name = "h100-dgx";
    c.gpu.model = "H100";
    c.gpu.hbm_GBps = 3350.0;  // H100 SXM5 HBM3
    c.gpu.memory_GiB = 80.0;
    return c;
  }
  throw InputError(fmt::format("{}: '{}' must be h200-dgx-ib or h100-dgx-ib, got '{}'", file,
                               field, name));
}

}  // namespace crystal::graph
