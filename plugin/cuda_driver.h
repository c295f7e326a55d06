// The CUDA driver API, as far as the plugin needs it, resolved at run time.
//
// With GDR (docs/plugin.md "GPU memory (GDR)") NCCL hands the plugin receive buffers in
// device memory. Writing them (LL/LL128 lines of a virtual sender, zeros, mirror copies)
// and staging real peers' bytes need a few driver calls. The plugin must load in processes
// without a GPU (CI, the emulation host), so it never links libcuda or libcudart: the
// functions come from dlopen("libcuda.so.1") on first use, or from a table a test installs
// (a fake that records calls and performs them on host memory).
//
// Types are the driver's ABI (cuda.h, CUDA 12/13): results are ints (0 = CUDA_SUCCESS,
// 600 = CUDA_ERROR_NOT_READY), device pointers 64-bit integers, handles opaque pointers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace crystal::plugin::cuda {

using Result = int;
using DevicePtr = std::uint64_t;
using Stream = void*;
using Event = void*;
using Context = void*;
using Module = void*;
using Function = void*;

inline constexpr Result kSuccess = 0;
inline constexpr Result kNotReady = 600;            // CUDA_ERROR_NOT_READY
inline constexpr unsigned kStreamNonBlocking = 1;   // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventDisableTiming = 2;  // CU_EVENT_DISABLE_TIMING
inline constexpr unsigned kMemoryTypeHost = 1;      // CU_MEMORYTYPE_HOST
inline constexpr unsigned kMemoryTypeDevice = 2;    // CU_MEMORYTYPE_DEVICE
inline constexpr unsigned kHostAllocPortable = 1;   // CU_MEMHOSTALLOC_PORTABLE
inline constexpr unsigned kHostAllocDeviceMap = 2;  // CU_MEMHOSTALLOC_DEVICEMAP
inline constexpr Result kNotSupported = 801;        // CUDA_ERROR_NOT_SUPPORTED
inline constexpr unsigned kHostRegisterPortable = 1;   // CU_MEMHOSTREGISTER_PORTABLE
inline constexpr unsigned kHostRegisterDeviceMap = 2;  // CU_MEMHOSTREGISTER_DEVICEMAP
inline constexpr int kHandleTypePosixFd = 1;          // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
inline constexpr int kLocationDevice = 1;             // CU_MEM_LOCATION_TYPE_DEVICE
inline constexpr int kAccessReadWrite = 3;            // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
using AllocationHandle = unsigned long long;          // CUmemGenericAllocationHandle

// CUmemAccessDesc (cuda.h): a CUmemLocation {type, id} and the access flags.
struct AccessDesc {
  int location_type = kLocationDevice;
  int location_id = 0;
  int flags = kAccessReadWrite;
};
static_assert(sizeof(AccessDesc) == 12);

// CUDA_MEMCPY2D (cuda.h, the _v2 layout that cuMemcpy2DAsync_v2 takes).
struct Memcpy2D {
  std::size_t srcXInBytes = 0, srcY = 0;
  unsigned srcMemoryType = 0;
  const void* srcHost = nullptr;
  DevicePtr srcDevice = 0;
  void* srcArray = nullptr;
  std::size_t srcPitch = 0;
  std::size_t dstXInBytes = 0, dstY = 0;
  unsigned dstMemoryType = 0;
  void* dstHost = nullptr;
  DevicePtr dstDevice = 0;
  void* dstArray = nullptr;
  std::size_t dstPitch = 0;
  std::size_t WidthInBytes = 0, Height = 0;
};
static_assert(sizeof(Memcpy2D) == 128);

// One entry per driver function; the comment names the libcuda symbol it is resolved from.
struct DriverApi {
  Result (*getErrorString)(Result, const char**);                          // cuGetErrorString
  Result (*ctxGetCurrent)(Context*);                                       // cuCtxGetCurrent
  Result (*ctxSetCurrent)(Context);                                        // cuCtxSetCurrent
  Result (*streamCreate)(Stream*, unsigned);                               // cuStreamCreate
  Result (*streamDestroy)(Stream);                                         // cuStreamDestroy_v2
  Result (*eventCreate)(Event*, unsigned);                                 // cuEventCreate
  Result (*eventDestroy)(Event);                                           // cuEventDestroy_v2
  Result (*eventRecord)(Event, Stream);                                    // cuEventRecord
  Result (*eventQuery)(Event);                                             // cuEventQuery
  Result (*memcpyHtoDAsync)(DevicePtr, const void*, std::size_t, Stream);  // cuMemcpyHtoDAsync_v2
  Result (*memcpyDtoHAsync)(void*, DevicePtr, std::size_t, Stream);        // cuMemcpyDtoHAsync_v2
  Result (*memcpyDtoDAsync)(DevicePtr, DevicePtr, std::size_t, Stream);    // cuMemcpyDtoDAsync_v2
  Result (*memcpy2DAsync)(const Memcpy2D*, Stream);                        // cuMemcpy2DAsync_v2
  Result (*memsetD8Async)(DevicePtr, unsigned char, std::size_t, Stream);  // cuMemsetD8Async
  // dst, pitch (bytes), value, width (32-bit words per row), height (rows), stream.
  Result (*memsetD2D32Async)(DevicePtr, std::size_t, unsigned, std::size_t, std::size_t,
                             Stream);                     // cuMemsetD2D32Async
  Result (*memHostAlloc)(void**, std::size_t, unsigned);  // cuMemHostAlloc
  Result (*memFreeHost)(void*);                           // cuMemFreeHost
  Result (*memAllocAsync)(DevicePtr*, std::size_t, Stream);  // cuMemAllocAsync
  Result (*memFreeAsync)(DevicePtr, Stream);                 // cuMemFreeAsync
  Result (*memHostGetDevicePointer)(DevicePtr*, void*, unsigned);  // cuMemHostGetDevicePointer_v2
  Result (*moduleLoadData)(Module*, const void*);                  // cuModuleLoadData
  Result (*moduleUnload)(Module);                                  // cuModuleUnload
  Result (*moduleGetFunction)(Function*, Module, const char*);     // cuModuleGetFunction
  // f, grid x/y/z, block x/y/z, shared memory bytes, stream, kernel parameters, extra.
  Result (*launchKernel)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, Stream, void**, void**);  // cuLaunchKernel
  Result (*ctxGetStreamPriorityRange)(int* least, int* greatest);  // cuCtxGetStreamPriorityRange
  Result (*streamCreateWithPriority)(Stream*, unsigned, int);     // cuStreamCreateWithPriority
  Result (*streamIsCapturing)(Stream, int*);  // cuStreamIsCapturing (CUstreamCaptureStatus)
  Result (*memHostRegister)(void*, std::size_t, unsigned);  // cuMemHostRegister_v2
  // Waits for running kernels (measured: tests/gpu/hybrid/host_register_probe.cu): close only.
  Result (*memHostUnregister)(void*);  // cuMemHostUnregister
  // Sharing a cuMem allocation (NCCL's buffers) with another process of this machine.
  Result (*ctxGetDevice)(int*);                                       // cuCtxGetDevice
  Result (*memGetAddressRange)(DevicePtr*, std::size_t*, DevicePtr);  // cuMemGetAddressRange_v2
  Result (*memRetainAllocationHandle)(AllocationHandle*, void*);      // cuMemRetainAllocationHandle
  // shareable handle out (an int fd for kHandleTypePosixFd), handle, type, flags.
  Result (*memExportToShareableHandle)(void*, AllocationHandle, int,
                                       unsigned long long);  // cuMemExportToShareableHandle
  // handle out, the OS handle (an fd, cast to a pointer), type.
  Result (*memImportFromShareableHandle)(AllocationHandle*, void*,
                                         int);  // cuMemImportFromShareableHandle
  // address out, size, alignment, fixed address (0: any), flags.
  Result (*memAddressReserve)(DevicePtr*, std::size_t, std::size_t, DevicePtr,
                              unsigned long long);   // cuMemAddressReserve
  Result (*memAddressFree)(DevicePtr, std::size_t);  // cuMemAddressFree
  // address, size, offset into the allocation, handle, flags.
  Result (*memMap)(DevicePtr, std::size_t, std::size_t, AllocationHandle,
                   unsigned long long);                                            // cuMemMap
  Result (*memUnmap)(DevicePtr, std::size_t);                                      // cuMemUnmap
  Result (*memSetAccess)(DevicePtr, std::size_t, const AccessDesc*, std::size_t);  // cuMemSetAccess
  Result (*memRelease)(AllocationHandle);                                          // cuMemRelease
  // Optional (nullptr where the driver lacks it): stream, address, value, flags (0: the
  // write waits for the stream's earlier work and fences it).
  Result (*streamWriteValue32)(Stream, DevicePtr, std::uint32_t,
                               unsigned);  // cuStreamWriteValue32_v2
};

// The driver in use: the table a test installed, else libcuda.so.1 loaded (and every symbol
// resolved) on the first call. Throws PluginError(Errc::System) naming libcuda.so.1 and the
// missing piece when it cannot be loaded; the failure is remembered (no retry per call).
[[nodiscard]] const DriverApi& driver();

// Tests: install `api` (nullptr: load `library` instead, as the plugin does with
// "libcuda.so.1"). Resets what an earlier call loaded or failed to load.
void setDriverForTesting(const DriverApi* api, const char* library = "libcuda.so.1");

// Throws PluginError(Errc::System) "<what>: CUDA error <rc> (<driver's text>)" unless rc is 0.
void check(Result rc, const char* what);

[[nodiscard]] inline DevicePtr dptr(const void* p) noexcept {
  return static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(p));
}

}  // namespace crystal::plugin::cuda
