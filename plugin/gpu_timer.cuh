// The GPU's global timer (ns), for the plugin's kernels (gpu_writer_kernel.cu,
// p2p_agent_kernel.cu): the only clock a kernel shares across its blocks and launches.
#pragma once

namespace crystal::plugin::gpu {

__device__ __forceinline__ unsigned long long globalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace crystal::plugin::gpu
