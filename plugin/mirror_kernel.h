// The mirror-result kernel (mirror_kernel.cu) on the host side: loaded once per CUDA context
// from the image nvcc built into the plugin, launched on the caller's stream.
//
// The interposer loads it when a communicator is created under data policy mirror
// (`prepareMirrorKernel`), not at the first reduction: loading a module may wait for the GPU,
// and at creation no NCCL kernel of that communicator can be running yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda_driver.h"

namespace crystal::plugin {

// The kernel in the calling thread's current context, loaded on first use; nullptr with `why`
// when there is no driver, no current context, no image (built without nvcc) or the image does
// not load. A context that failed is not tried again, and each reason is logged once (INFO).
// Never throws.
[[nodiscard]] cuda::Function mirrorKernel(std::string* why) noexcept;

// Enqueues dst[i] = `op` (mirror_kernel::kScale / kPower) over n copies of src[i] for `count`
// elements of NCCL type `type` on `stream`. Throws PluginError(Errc::System) on a CUDA error.
void launchMirrorKernel(cuda::Function f, cuda::DevicePtr dst, cuda::DevicePtr src,
                        std::size_t count, int type, int op, std::uint64_t n, cuda::Stream stream);

// Tests: the image to load (nullptr: the built-in one, if any); forgets loaded and failed
// contexts and the reasons said.
void setMirrorKernelImageForTesting(const void* image);

}  // namespace crystal::plugin
