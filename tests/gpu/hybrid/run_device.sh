#!/usr/bin/env bash
# GPU proof of hybrid emulation, run on the GPU machine from the repository root:
#   tests/gpu/hybrid/run_device.sh CASE [hybrid_nccl options...]
# CASE: build | one (rank 0 real, 63 virtual) | two (ranks 0,1 real, verified bytes) |
#       rank5 (only rank 5 real) | split (world + 8 groups of 8, alternately) |
#       big (8192 ranks, rank 0 real) | nohost (CRYSTAL_HOST points nowhere: must fail fast)
# Builds crystal + libnccl-net-crystal.so (build-device/, ignored by git) and hybrid_nccl
# against the pip NCCL 2.28.9 that PyTorch uses, then runs `crystal emulate` with
# NCCL_DEBUG=INFO. Logs and results go to $OUT (default /tmp/hybrid-out).
set -uo pipefail
case_name=${1:-one}
shift || true
OUT=${OUT:-/tmp/hybrid-out}
mkdir -p "$OUT"
B=build-device
NCCL_HOME=$(python3 -c 'import torch,os; print(os.path.realpath(os.path.dirname(torch.__file__)+"/../nvidia/nccl"))')
CUDA=${CUDA_HOME:-/usr/local/cuda}

build() {
  local deps=()
  # nlohmann-json is header-only; carried from the dev machine if the device lacks it.
  [ -d build-deps/nlohmann ] && deps=(-Dnlohmann_json_DIR="$PWD/build-deps/nlohmann/share/cmake/nlohmann_json")
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCRYSTAL_TESTS=OFF -DCRYSTAL_BENCH=OFF \
        "${deps[@]}" >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; return 1; }
  cmake --build $B -j 16 --target crystal crystal_nccl_plugin >"$OUT/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$OUT/build.log" | head -30; return 1; }
  g++ -O2 -std=c++17 tests/gpu/hybrid/hybrid_nccl.cc -I"$NCCL_HOME/include" -I"$CUDA/include" \
      -L"$NCCL_HOME/lib" -l:libnccl.so.2 -L"$CUDA/lib64" -lcudart \
      -Wl,-rpath,"$NCCL_HOME/lib" -o $B/hybrid_nccl || return 1
  echo "built: $(ls $B/cli/crystal $B/plugin/libnccl-net-crystal.so $B/hybrid_nccl)"
}

# config with the given real ranks
config() {
  sed "s/real_ranks: \[0\]/real_ranks: [$1]/" tests/gpu/hybrid/hybrid64.yaml |
    if [ "$case_name" = big ]; then sed "s/nodes: 8/nodes: 1024/; s/world_size: 64/world_size: 8192/; s/dp: 8/dp: 1024/"; else cat; fi \
    >"$OUT/config-$case_name.yaml"
  echo "$OUT/config-$case_name.yaml"
}

emulate() {  # emulate CONFIG SPLIT -- CMD...
  local cfg=$1 split=$2
  shift 2
  local t0=$(date +%s%N)
  timeout -k 5 ${EMULATE_TIMEOUT:-200} $B/cli/crystal emulate "$cfg" ${split:+--split $split} \
      --plugin "$PWD/$B/plugin/libnccl-net-crystal.so" "$@"
  local rc=$?
  echo "crystal emulate: rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms"
  return $rc
}

export NCCL_DEBUG=${NCCL_DEBUG:-INFO}
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET,BOOTSTRAP,GRAPH,ENV}
export NCCL_DEBUG_FILE="$OUT/nccl-$case_name.%h.%p.log"
export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
export ID_FILE="$OUT/id-$case_name.bin"
rm -f "$ID_FILE"
[ -x $B/hybrid_nccl ] && [ -x $B/cli/crystal ] || build || exit 1
P=$PWD/$B/hybrid_nccl
case "$case_name" in
  build) build ;;
  one)   emulate "$(config 0)" "" -- env RANK=0 NRANKS=64 "$P" "$@" ;;
  rank5) emulate "$(config 5)" "" -- env RANK=5 NRANKS=64 ID_ROOT=1 "$P" "$@" ;;
  big)   emulate "$(config 0)" "" -- env RANK=0 NRANKS=8192 "$P" "$@" ;;
  nohost) t0=$(date +%s%N)
         CRYSTAL_HOST=127.0.0.1:1 CRYSTAL_TIMEOUT=3 LD_PRELOAD=$PWD/$B/plugin/libnccl-net-crystal.so \
           NCCL_NET_PLUGIN=crystal NCCL_NET=crystal RANK=0 NRANKS=64 timeout 60 "$P" "$@"
         echo "nohost: rc=$? after $(( ($(date +%s%N) - t0) / 1000000 )) ms" ;;
  split) emulate "$(config 0)" block:8 -- env RANK=0 NRANKS=64 "$P" --split 8 "$@" ;;
  two)   emulate "$(config 0,1)" "" -- bash -c "
           RANK=0 NRANKS=64 ID_ROOT=1 REAL_PEER=1 $P $* > $OUT/two-rank0.txt 2>&1 & a=\$!
           RANK=1 NRANKS=64 ID_ROOT=0 REAL_PEER=0 $P $* > $OUT/two-rank1.txt 2>&1 & b=\$!
           wait \$a; ra=\$?; wait \$b; rb=\$?; exit \$((ra|rb))"
         rc=$?; tail -n 30 "$OUT/two-rank0.txt" "$OUT/two-rank1.txt"; exit $rc ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac
