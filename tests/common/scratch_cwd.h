// A working directory for the commands a test runs through the shell: `crystal emulate`
// without --run-dir writes crystal-run-<UTC time> where it runs, and a test's own directory
// in the build tree would keep every one of them.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace crystal::test {

// "cd DIR && ": DIR is made once per test process under the system's temporary directory
// and removed, with what the commands left in it, when the process exits.
inline const std::string& inScratchDir() {
  struct Scratch {
    std::filesystem::path dir;
    std::string prefix;
    Scratch() {
      std::string t = (std::filesystem::temp_directory_path() / "crystal-test-cwd-XXXXXX").string();
      if (::mkdtemp(t.data()) != nullptr) {
        dir = t;
        prefix = "cd '" + t + "' && ";
      }
    }
    ~Scratch() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch s;
  return s.prefix;
}

}  // namespace crystal::test
