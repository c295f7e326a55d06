# Sourced by the GPU checks of this folder (run.sh, run_writer.sh, run_agent.sh) on the device
# machine, from the repository root: `build_checks LOG TARGET...` configures this folder's
# CMake project against the NCCL that PyTorch uses (its pip nvidia/nccl folder) and builds
# TARGET... in $build (build-device/gpu-plugin), logging to $out/LOG-cmake.log and
# $out/LOG-build.log; on failure it prints the log's tail and exits 1. Sets $nccl_root.
build=build-device/gpu-plugin
build_checks() {
  local log=$1
  shift
  nccl_root=$(python3 -c 'import torch,os; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "nccl")))')
  cmake -S tests/gpu/plugin -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCL_ROOT="$nccl_root" \
    >"$out/$log-cmake.log" 2>&1 || { tail -30 "$out/$log-cmake.log"; exit 1; }
  cmake --build "$build" -j16 --target "$@" >"$out/$log-build.log" 2>&1 ||
    { tail -40 "$out/$log-build.log"; exit 1; }
}
