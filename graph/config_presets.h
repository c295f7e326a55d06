// Named cluster presets (`cluster: {preset: NAME}`); fields given next to the preset
// override it.
#pragma once

#include <string>

#include "crystal/config/config.h"

namespace crystal::graph {

// Throws InputError naming `field` in `file` for an unknown preset.
[[nodiscard]] ClusterConfig clusterPreset(const std::string& name, const std::string& field,
                                          const std::string& file);

}  // namespace crystal::graph
