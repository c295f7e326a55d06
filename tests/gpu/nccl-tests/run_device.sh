#!/usr/bin/env bash
# NCCL-tests under emulation on the GPU machine (docs/nccl-tests.md), from the repository root:
#   tests/gpu/nccl-tests/run_device.sh [build|sweep|two|all]
# build: crystal + libnccl-net-crystal.so (build-device/) and NCCL-tests from the ignored
#        folder third_party_fetched/nccl-tests/ (fetched by whoever runs this; never
#        committed) with NCCL-tests' own Makefile, against PyTorch's pip NCCL 2.28.9.
# sweep: the *_perf binaries ($OPS, default all six), unmodified, one real GPU (-g 1), targets of N = $NS ranks
#        (default 8 64 1024 8192), sizes $MINB..$MAXB by factor $FACTOR (8..1G x4), each under
#        `crystal nccl-tests` (= crystal emulate + the table for N), beside
#        `crystal simulate --sweep` of the same config (the tuner hands NCCL the target's
#        algorithm/protocol choice, so both sides use the same ones; a Simple-only sweep
#        is written beside it as sweep-simple.*).
# two:   all_reduce_perf on 2 real ranks (MPI build, 2 processes on GPU 0, target ranks 0 and
#        4096 of 8192) and on 1 real rank, same sizes, for the 2 % comparison.
# Output under $OUT (default /tmp/nccl-tests-out): <N>/<op>.txt (program + target table),
# <N>/<op>.json, <N>/sweep.txt|json, summary.txt (per-size times side by side).
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/nccl-tests-out}
mkdir -p "$OUT"
B=${B:-build-device}
SRC=${NCCL_TESTS_SRC:-third_party_fetched/nccl-tests}
NT=$PWD/$B/nccl-tests
NS=${NS:-8 64 1024 8192}
MINB=${MINB:-8} MAXB=${MAXB:-1G} FACTOR=${FACTOR:-4}
ITERS=${ITERS:-5} WARMUP=${WARMUP:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-100}
OPS=${OPS:-all_reduce all_gather reduce_scatter alltoall sendrecv broadcast}
PIP_NCCL=$(python3 -c 'import torch,os; print(os.path.realpath(os.path.dirname(torch.__file__)+"/../nvidia/nccl"))')
CUDA=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PIP_NCCL/lib:${LD_LIBRARY_PATH:-}"

. tests/gpu/common/build.sh
build_crystal() { crystal_build $B "$OUT"; }

# NCCL-tests' Makefile wants NCCL_HOME/{include,lib/libnccl.so}; the pip wheel ships only
# libnccl.so.2, so a folder of links stands in for NCCL_HOME.
build_nccl_tests() {
  [ -f "$SRC/src/common.cu" ] || { echo "no NCCL-tests source in $SRC (fetch NVIDIA/nccl-tests there)"; return 1; }
  local home=$PWD/$B/nccl-home
  mkdir -p "$home/lib"
  ln -sfn "$PIP_NCCL/include" "$home/include"
  ln -sf "$PIP_NCCL/lib/libnccl.so.2" "$home/lib/libnccl.so"
  ln -sf "$PIP_NCCL/lib/libnccl.so.2" "$home/lib/libnccl.so.2"
  local gencode="-gencode=arch=compute_90,code=sm_90"
  make -C "$SRC/src" -j 16 build BUILDDIR="$NT" NCCL_HOME="$home" CUDA_HOME="$CUDA" \
       NVCC_GENCODE="$gencode" >"$OUT/nccl-tests-build.log" 2>&1 ||
    { tail -30 "$OUT/nccl-tests-build.log"; return 1; }
  # The MPI flavour (for two real processes) only where MPI headers exist.
  local mpi=${MPI_HOME:-/usr/lib/x86_64-linux-gnu/openmpi}
  if [ ! -f "$mpi/include/mpi.h" ] && command -v mpicc >/dev/null; then
    # Elsewhere: a folder of links laid out as NCCL-tests' Makefile expects.
    local inc lib
    inc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
    lib=$(mpicc --showme:libdirs 2>/dev/null | awk '{print $1}')
    if [ -f "$inc/mpi.h" ]; then
      mpi=$PWD/$B/mpi-home
      mkdir -p "$mpi"
      ln -sfn "$inc" "$mpi/include"
      ln -sfn "$lib" "$mpi/lib"
    fi
  fi
  if [ -f "$mpi/include/mpi.h" ]; then
    make -C "$SRC/src" -j 16 build MPI=1 MPI_HOME="$mpi" NAME_SUFFIX=_mpi BUILDDIR="$NT-mpi" \
         NCCL_HOME="$home" CUDA_HOME="$CUDA" NVCC_GENCODE="$gencode" \
         >"$OUT/nccl-tests-mpi-build.log" 2>&1 || tail -20 "$OUT/nccl-tests-mpi-build.log"
  else
    echo "no mpi.h under $mpi: the two-process case is skipped" | tee "$OUT/no-mpi.txt"
  fi
  ls "$NT"/*_perf* | head -20
}

# config for an N-rank target: N/8 nodes (1 node below 8), real ranks $2 (default 0).
config() {
  local n=$1 real=${2:-0} nodes=$(( $1 >= 8 ? $1 / 8 : 1 ))
  local f="$OUT/$n/config${3:-}.yaml"
  mkdir -p "$OUT/$n"
  sed -e "s/^  nodes: 1024/  nodes: $nodes/" -e "s/world_size: 8192/world_size: $n/" \
      -e "s/real_ranks: \[0\] /real_ranks: [$real]/" config/examples/nccl-tests-8192.yaml >"$f"
  echo "$f"
}

crystal_run() {  # crystal_run LOG JSON CONFIG -- CMD...
  local log=$1 json=$2 cfg=$3
  shift 3
  local t0=$(date +%s%N)
  timeout -k 5 "$RUN_TIMEOUT" $B/cli/crystal nccl-tests "$cfg" --json "$json" \
      --plugin "$PWD/$B/plugin/libnccl-net-crystal.so" "$@" >"$log" 2>"$log.err"
  local rc=$?
  echo "rc=$rc wall_ms=$(( ($(date +%s%N) - t0) / 1000000 )) $log" | tee -a "$OUT/runs.txt"
}

nt_args() { echo "-b $MINB -e $MAXB -f $FACTOR -n $ITERS -w $WARMUP -c 0"; }

sweep() {
  for n in $NS; do
    local cfg; cfg=$(config "$n")
    # The tuner gives NCCL the target's (algorithm, protocol) per size, so the emulated run
    # compares with the free sweep; the Simple-only sweep is kept for reference.
    $B/cli/crystal simulate "$cfg" --sweep -b "$MINB" -e "$MAXB" -f "$FACTOR" \
        --json "$OUT/$n/sweep.json" >"$OUT/$n/sweep.txt" 2>&1
    $B/cli/crystal simulate "$cfg" --sweep -b "$MINB" -e "$MAXB" -f "$FACTOR" --proto Simple \
        --json "$OUT/$n/sweep-simple.json" >"$OUT/$n/sweep-simple.txt" 2>&1
    for op in $OPS; do
      crystal_run "$OUT/$n/$op.txt" "$OUT/$n/$op.json" "$cfg" -- "$NT/${op}_perf" -g 1 $(nt_args)
    done
  done
}

two() {
  local n=8192 cfg1 cfg2
  cfg1=$(config $n 0 -one)
  cfg2=$(config $n "0, 4096" -two)
  crystal_run "$OUT/$n/all_reduce-one.txt" "$OUT/$n/all_reduce-one.json" "$cfg1" -- \
      "$NT/all_reduce_perf" -g 1 $(nt_args)
  if [ -x "$NT-mpi/all_reduce_perf_mpi" ]; then
    crystal_run "$OUT/$n/all_reduce-two.txt" "$OUT/$n/all_reduce-two.json" "$cfg2" -- \
        mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_TESTS_DEVICE=0 \
        "$NT-mpi/all_reduce_perf_mpi" -g 1 $(nt_args)
  fi
}

summary() {  # per-size times: emulated (out-of-place) beside simulated, from the JSON files
  python3 - "$OUT" <<'PY' >"$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
for n in sorted((d for d in os.listdir(out) if d.isdigit()), key=int):
    sim = {}
    p = os.path.join(out, n, "sweep.json")
    if os.path.exists(p):
        for r in json.load(open(p))["results"]:
            sim[(r["op"], r["size"])] = r
    for f in sorted(os.listdir(os.path.join(out, n))):
        if not f.endswith(".json") or f.startswith("sweep"):
            continue
        em = json.load(open(os.path.join(out, n, f)))
        print(f"# N={n} {f[:-5]} (program ranks {em.get('program_ranks')})")
        print(f"{'size':>12} {'emulated us':>12} {'simulated us':>13} {'ratio':>7} {'busbw em':>9} {'busbw sim':>9}")
        for r in em["results"]:
            if r.get("in_place"):
                continue
            s = sim.get((r["op"], r["size"]))
            st = s["time"] if s else float("nan")
            ratio = r["time"] / st if s and st > 0 else float("nan")
            sb = s["bus_bw"] if s else float("nan")
            print(f"{r['size']:>12} {r['time']:>12.2f} {st:>13.2f} {ratio:>7.3f} {r['bus_bw']:>9.2f} {sb:>9.2f}")
        print()
PY
  cat "$OUT/summary.txt"
}

case "$what" in
  build) build_crystal && build_nccl_tests ;;
  sweep) sweep; summary ;;
  two) two; summary ;;
  all) { [ -x $B/cli/crystal ] || build_crystal; } && { [ -x "$NT/all_reduce_perf" ] || build_nccl_tests; } &&
       sweep && two; summary ;;
  *) echo "unknown case $what (build|sweep|two|all)" >&2; exit 2 ;;
esac
