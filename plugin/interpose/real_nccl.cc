#include "plugin/interpose/real_nccl.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "crystal/base/log.h"

namespace crystal::interpose {

void* realSymbol(const char* name) noexcept {
  // Never destroyed: NCCL's and the program's threads may call in while exit() runs.
  static auto* mu = new std::mutex;
  static auto* cache = new std::unordered_map<std::string, void*>;
  std::lock_guard lock(*mu);
  if (auto it = cache->find(name); it != cache->end()) return it->second;
  void* sym = nullptr;
  // NOLOAD: never load an NCCL of our choosing; forward to the one the program loaded.
  if (void* lib = ::dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_NOW)) {
    sym = ::dlsym(lib, name);
    ::dlclose(lib);  // drops only the reference NOLOAD added
  }
  if (sym == nullptr) sym = ::dlsym(RTLD_NEXT, name);
  if (sym == nullptr) {
    CRYSTAL_ERROR(
        "interposer: cannot find the real {} (libnccl.so.2 is not loaded in this "
        "process)",
        name);
    return nullptr;  // not cached: NCCL may be loaded later
  }
  cache->emplace(name, sym);
  return sym;
}

int realNcclVersion() noexcept {
  auto fn = real<GetVersionFn>("ncclGetVersion");
  int v = 0;
  if (fn == nullptr || fn(&v) != kNcclSuccess) return 0;
  return v;
}

}  // namespace crystal::interpose
