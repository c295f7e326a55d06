// Finding python/crystal_site beside the crystal executable and the environment that loads it.
#include "cli/python_site.h"

#include <cstdlib>
#include <filesystem>

#include "crystal/base/error.h"

namespace crystal::cli {

namespace fs = std::filesystem;

std::string pythonSiteDir() {
  auto has_site = [](const fs::path& dir) {
    std::error_code ec;
    return fs::is_regular_file(dir / "sitecustomize.py", ec);
  };
  if (const char* env = std::getenv("CRYSTAL_PYTHON_SITE"); env != nullptr && *env != '\0') {
    if (has_site(env)) return fs::absolute(env).string();
    throw InputError(std::string("CRYSTAL_PYTHON_SITE=") + env + ": no sitecustomize.py there");
  }
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::string tried;
  for (const fs::path& p : {exe_dir / ".." / "python" / "crystal_site",
                            exe_dir / ".." / "share" / "crystal" / "python" / "crystal_site"}) {
    if (has_site(p)) return fs::canonical(p).string();
    tried += " " + p.lexically_normal().string();
  }
  throw InputError("cannot find crystal's python/crystal_site (looked at" + tried +
                   "); set CRYSTAL_PYTHON_SITE to the directory");
}

std::vector<std::pair<std::string, std::string>> pythonSiteEnvironment(const std::string& site_dir,
                                                                       const std::string& run_dir,
                                                                       bool profile) {
  std::string path = site_dir;
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
    path += ":";
    path += old;
  }
  const char* outer = std::getenv("CRYSTAL_RUN_DIR");
  std::vector<std::pair<std::string, std::string>> env{
      {"PYTHONPATH", path},
      {"CRYSTAL_RUN_DIR", outer != nullptr && *outer != '\0' ? outer : run_dir}};
  if (profile) env.emplace_back("CRYSTAL_RECORD_PROFILE", "1");
  return env;
}

}  // namespace crystal::cli
