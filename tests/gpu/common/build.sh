# Shared by the tests/gpu/*/run_device.sh scripts (sourced, from the repository root):
# building CrystalLLM and the small NCCL test programs on the GPU machine.

# crystal_build DIR LOGDIR [EXTRA_TARGETS...]: Release build of crystal and
# libnccl-net-crystal.so (plus any extra targets) in DIR, without tests or benchmarks; logs in
# LOGDIR/cmake.log and LOGDIR/build.log, their errors printed on failure.
crystal_build() {
  local dir=$1 logs=$2 deps=()
  shift 2
  # nlohmann-json is header-only; carried from the dev machine if the device lacks it.
  [ -d build-deps/nlohmann ] && deps=(-Dnlohmann_json_DIR="$PWD/build-deps/nlohmann/share/cmake/nlohmann_json")
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCRYSTAL_TESTS=OFF -DCRYSTAL_BENCH=OFF \
        "${deps[@]}" >"$logs/cmake.log" 2>&1 || { tail -30 "$logs/cmake.log"; return 1; }
  cmake --build "$dir" -j 16 --target crystal crystal_nccl_plugin "$@" >"$logs/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$logs/build.log" | head -30; return 1; }
}

# nccl_program SRC BIN: a C++ test program (tests/gpu/common/gpu_check.h) linked to the NCCL
# in NCCL_HOME (PyTorch's pip NCCL on the device) and the CUDA runtime in CUDA.
nccl_program() {
  g++ -O2 -std=c++17 "$1" -Itests/gpu/common -I"$NCCL_HOME/include" -I"$CUDA/include" \
      -L"$NCCL_HOME/lib" -l:libnccl.so.2 -L"$CUDA/lib64" -lcudart \
      -Wl,-rpath,"$NCCL_HOME/lib" -o "$2"
}
