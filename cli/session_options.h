// The options `crystal host` and `crystal emulate` share: both start an emulation session
// (host + store, crystal/control/emulation_session.h) and so take the same addresses, split
// rules, plugin path and store timeout. One definition keeps their spelling and checks equal.
#pragma once

#include <string>

#include "cli/options.h"
#include "crystal/control/emulation_session.h"

namespace crystal::cli {

// Adds --listen, --split, --plugin, --store-listen and --store-timeout to `parser`; values
// go into `opts` and `plugin`, which must outlive parser.parse(). `command` prefixes errors.
OptionParser& addSessionOptions(OptionParser& parser, const std::string& command,
                                control::EmulationSessionOptions& opts, std::string& plugin);

}  // namespace crystal::cli
