#include "cuda_driver.h"

#include <dlfcn.h>
#include <fmt/core.h>

#include <mutex>
#include <string>
#include <type_traits>

#include "errors.h"

namespace crystal::plugin::cuda {
namespace {

struct Loaded {
  std::mutex mu;
  bool tried = false;
  const DriverApi* injected = nullptr;
  std::string library = "libcuda.so.1";
  DriverApi api{};
  std::string error;  // why loading failed; empty once loaded
};

Loaded& loaded() {
  static auto* l = new Loaded;  // never destroyed: pacing threads call the driver during exit
  return *l;
}

// Resolves every entry or names the first symbol that is missing. The library stays loaded
// for the life of the process (the CUDA runtime of the training program holds it anyway).
std::string loadInto(const std::string& library, DriverApi& api) {
  void* dl = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char* why = dlerror();
    return fmt::format(
        "cannot load {} ({}): GPU memory needs the CUDA driver (NET receive buffers "
        "under GDR: set CRYSTAL_GDR=0 or emulation.gdr: false to keep them in host memory; "
        "CRYSTAL_P2P_POOL: unset it)",
        library, why ? why : "no reason given");
  }
  std::string missing;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(dl, name));
    if (!fn && missing.empty()) missing = name;
  };
  get(api.getErrorString, "cuGetErrorString");
  get(api.ctxGetCurrent, "cuCtxGetCurrent");
  get(api.ctxSetCurrent, "cuCtxSetCurrent");
  get(api.streamCreate, "cuStreamCreate");
  get(api.streamDestroy, "cuStreamDestroy_v2");
  get(api.eventCreate, "cuEventCreate");
  get(api.eventDestroy, "cuEventDestroy_v2");
  get(api.eventRecord, "cuEventRecord");
  get(api.eventQuery, "cuEventQuery");
  get(api.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  get(api.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  get(api.memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  get(api.memcpy2DAsync, "cuMemcpy2DAsync_v2");
  get(api.memsetD8Async, "cuMemsetD8Async");
  get(api.memsetD2D32Async, "cuMemsetD2D32Async");
  get(api.memHostAlloc, "cuMemHostAlloc");
  get(api.memFreeHost, "cuMemFreeHost");
  get(api.memAllocAsync, "cuMemAllocAsync");
  get(api.memFreeAsync, "cuMemFreeAsync");
  get(api.memHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
  get(api.moduleLoadData, "cuModuleLoadData");
  get(api.moduleUnload, "cuModuleUnload");
  get(api.moduleGetFunction, "cuModuleGetFunction");
  get(api.launchKernel, "cuLaunchKernel");
  get(api.ctxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange");
  get(api.streamCreateWithPriority, "cuStreamCreateWithPriority");
  get(api.streamIsCapturing, "cuStreamIsCapturing");
  get(api.memHostRegister, "cuMemHostRegister_v2");
  get(api.memHostUnregister, "cuMemHostUnregister");
  get(api.ctxGetDevice, "cuCtxGetDevice");
  get(api.memGetAddressRange, "cuMemGetAddressRange_v2");
  get(api.memRetainAllocationHandle, "cuMemRetainAllocationHandle");
  get(api.memExportToShareableHandle, "cuMemExportToShareableHandle");
  get(api.memImportFromShareableHandle, "cuMemImportFromShareableHandle");
  get(api.memAddressReserve, "cuMemAddressReserve");
  get(api.memAddressFree, "cuMemAddressFree");
  get(api.memMap, "cuMemMap");
  get(api.memUnmap, "cuMemUnmap");
  get(api.memSetAccess, "cuMemSetAccess");
  get(api.memRelease, "cuMemRelease");
  if (!missing.empty())
    return fmt::format("{} has no symbol {} (driver too old?)", library, missing);
  // Optional: DeviceQueue falls back to events without it.
  api.streamWriteValue32 =
      reinterpret_cast<decltype(api.streamWriteValue32)>(dlsym(dl, "cuStreamWriteValue32_v2"));
  return {};
}

}  // namespace

const DriverApi& driver() {
  Loaded& l = loaded();
  std::lock_guard lock(l.mu);
  if (l.injected) return *l.injected;
  if (!l.tried) {
    l.tried = true;
    l.error = loadInto(l.library, l.api);
  }
  if (!l.error.empty()) throw PluginError(Errc::System, l.error);
  return l.api;
}

void setDriverForTesting(const DriverApi* api, const char* library) {
  Loaded& l = loaded();
  std::lock_guard lock(l.mu);
  l.injected = api;
  l.library = library ? library : "libcuda.so.1";
  l.tried = false;
  l.error.clear();
}

void check(Result rc, const char* what) {
  if (rc == kSuccess) return;
  const char* text = nullptr;
  try {
    const DriverApi& d = driver();
    if (d.getErrorString) (void)d.getErrorString(rc, &text);
  } catch (...) {
  }
  throw PluginError(Errc::System,
                    fmt::format("{}: CUDA error {} ({})", what, rc, text ? text : "no text"));
}

}  // namespace crystal::plugin::cuda
