#include "cli/session_options.h"

#include "crystal/control/split_rules.h"

namespace crystal::cli {

OptionParser& addSessionOptions(OptionParser& parser, const std::string& command,
                                control::EmulationSessionOptions& opts, std::string& plugin) {
  return parser.value("--listen", [&opts](const std::string& v) { opts.host.listen = v; })
      .value("--split",
             [&opts](const std::string& v) {
               opts.host.split_rules = control::parseSplitRules(v);
             })
      .value("--plugin", [&plugin](const std::string& v) { plugin = v; })
      .value("--store-listen", [&opts](const std::string& v) { opts.store_listen = v; })
      .value("--store-timeout", [&opts, command](const std::string& v) {
        opts.store_timeout_s = positiveNumber(command, "--store-timeout", v);
      });
}

}  // namespace crystal::cli
