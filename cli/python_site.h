// Where the `crystal_site` Python package is (python/crystal_site/: a sitecustomize.py that
// times the steps and records the peak memory of an unmodified PyTorch program,
// docs/record.md), and the environment that injects it into a program crystal starts.
//
// Used by `crystal record` and `crystal emulate`: both start the user's program themselves.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace crystal::cli {

// The crystal_site directory: $CRYSTAL_PYTHON_SITE if set, else next to the running
// executable, in the build tree (<build>/cli/crystal -> <build>/python/crystal_site) or the
// install tree (<prefix>/bin/crystal -> <prefix>/share/crystal/python/crystal_site).
// Throws InputError listing the places it looked.
[[nodiscard]] std::string pythonSiteDir();

// Variables that make every Python process of the program load crystal_site and write
// `<run_dir>/rank<RANK>.pyrun.json` at exit: PYTHONPATH (site_dir first, the caller's
// PYTHONPATH after it) and CRYSTAL_RUN_DIR. With `profile`, CRYSTAL_RECORD_PROFILE=1 too:
// torch.profiler traces steps [warmup, warmup + steps) into the run dir
// (CRYSTAL_PROFILE_WARMUP / CRYSTAL_PROFILE_STEPS, defaults 2 and 1, pass through).
// A CRYSTAL_RUN_DIR already in the environment wins over `run_dir` (`crystal record --
// crystal emulate ...`: the outer command reads the files): read the returned value.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> pythonSiteEnvironment(
    const std::string& site_dir, const std::string& run_dir, bool profile);

}  // namespace crystal::cli
