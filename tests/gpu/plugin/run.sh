#!/usr/bin/env bash
# GPU check of the crystal NCCL plugin (device machine): build the plugin and the NCCL test
# program there, run two ranks on the one GPU with distinct NCCL_HOSTID through
# NCCL_NET_PLUGIN=crystal, print per-size timing beside the model, keep the logs in $OUT.
# Usage: tests/gpu/plugin/run.sh [MAX_BYTES]   (default 1 GiB)
set -euo pipefail
cd "$(dirname "$0")/../../.."
max=${1:-1073741824}
out=${OUT:-/tmp/crystal-gpu-plugin}
mkdir -p "$out"
nccl_root=$(python3 -c 'import torch,os; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "nccl")))')
echo "NCCL_ROOT=$nccl_root"
build=build-device/gpu-plugin
cmake -S tests/gpu/plugin -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCL_ROOT="$nccl_root" >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
cmake --build "$build" -j16 --target crystal_nccl_plugin nccl_crystal_check >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
plugin_dir=$(dirname "$(find "$build" -name libnccl-net-crystal.so | head -1)")
export LD_LIBRARY_PATH="$plugin_dir:$nccl_root/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NET_PLUGIN=crystal NCCL_NET=crystal NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO \
       NCCL_DEBUG_SUBSYS=INIT,NET,TUNING NCCL_RAS_ENABLE=0 NCCL_NVLS_ENABLE=0
idf=$(mktemp -u /tmp/crystal-ncclid.XXXXXX)
NCCL_HOSTID=h0 "$build/nccl_crystal_check" 0 "$idf" "$max" >"$out/rank0.log" 2>&1 &
p0=$!
NCCL_HOSTID=h1 "$build/nccl_crystal_check" 1 "$idf" "$max" >"$out/rank1.log" 2>&1 &
p1=$!
rc=0
wait $p0 || rc=$?
wait $p1 || rc=$((rc ? rc : $?))
echo "--- NCCL lines about the network and tuner (rank 0)"
grep -E "NET/|crystal|Using network|tuner|Tuner" "$out/rank0.log" | head -40 || true
echo "--- results (rank 0)"
grep -vE "NCCL (INFO|WARN)" "$out/rank0.log" | tail -60
echo "--- rank 1 tail"
tail -5 "$out/rank1.log"
echo "exit code $rc"
exit $rc
