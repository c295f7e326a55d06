#include "rdma_probe.h"

#include <dlfcn.h>

namespace crystal::plugin {

RdmaProbe probeRdma() noexcept {
  RdmaProbe p;
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return p;
  p.library = true;
  // Signatures of ibv_get_device_list / ibv_free_device_list / ibv_get_device_name.
  using GetList = void** (*)(int*);
  using FreeList = void (*)(void**);
  using GetName = const char* (*)(void*);
  auto get_list = reinterpret_cast<GetList>(dlsym(lib, "ibv_get_device_list"));
  auto free_list = reinterpret_cast<FreeList>(dlsym(lib, "ibv_free_device_list"));
  auto get_name = reinterpret_cast<GetName>(dlsym(lib, "ibv_get_device_name"));
  if (get_list && free_list) {
    int n = 0;
    void** list = get_list(&n);
    if (list) {
      p.devices = n;
      if (n > 0 && get_name) p.first = get_name(list[0]);
      free_list(list);
    }
  }
  dlclose(lib);
  return p;
}

}  // namespace crystal::plugin
