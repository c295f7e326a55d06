#!/usr/bin/env bash
# GPU check of LL/LL128 from virtual senders and the data policy (docs/plugin.md "Data policy
# and protocols"), run on the GPU machine from the repository root:
#   tests/gpu/proto/run_device.sh [CASE...]      (default: build choices mirror zero none ll128)
# CASE: build   | crystal + libnccl-net-crystal.so (build-device/) + proto_check (pip NCCL)
#       choices | rank 0 real of 64, data mirror, NCCL picks protocols freely, 8 B .. $MAX;
#                 NCCL's choice per size (INFO, printed by rank 0 only) vs the tuner's line
#       mirror | zero | none
#               | rank 5 real of 64 (broadcast root 0 is virtual), CRYSTAL_DATA=CASE
#       ll128   | rank 0, mirror, NCCL_PROTO=LL,LL128,Simple (LL128 enabled without GDR)
#       torch   | PyTorch (needs crystal emulate's TCPStore stand-in): ddp_check.py as rank 5
#                 of 64 per policy: mirror must pass, zero and none must fail with PyTorch's
#                 own message (not hang: 150 s timeout)
# Logs go to $OUT (default /tmp/proto-out). MAX (choices, mirror) defaults to 1 GiB,
# MAX_OTHER (zero, none, ll128) to 64 MiB, to stay within ~2 minutes after the build.
# MIN (default 8) and OPS (e.g. allgather,reducescatter; default all four and `types`, the
# per-type reduction check under mirror) narrow every case's sweep;
# TRACE=1 writes the plugin's per-request trace ($OUT/trace-CASE.<pid>.csv).
set -uo pipefail
OUT=${OUT:-/tmp/proto-out}
MAX=${MAX:-1073741824}
MAX_OTHER=${MAX_OTHER:-67108864}
mkdir -p "$OUT"
B=build-device
NCCL_HOME=$(python3 -c 'import torch,os; print(os.path.realpath(os.path.dirname(torch.__file__)+"/../nvidia/nccl"))')
CUDA=${CUDA_HOME:-/usr/local/cuda}
here=tests/gpu/proto

. tests/gpu/common/build.sh
build() {
  crystal_build $B "$OUT" && nccl_program $here/proto_check.cc $B/proto_check || return 1
  echo "built: $(ls $B/cli/crystal $B/plugin/libnccl-net-crystal.so $B/proto_check)"
}

config() {  # config REAL_RANK
  sed "s/real_ranks: \[5\]/real_ranks: [$1]/" $here/proto64.yaml >"$OUT/config-rank$1.yaml"
  echo "$OUT/config-rank$1.yaml"
}

run() {  # run NAME REAL_RANK MAX [env...]
  local name=$1 rank=$2 max=$3
  shift 3
  local t0=$(date +%s%N)
  NCCL_DEBUG_FILE="$OUT/nccl-$name.%h.%p.log" \
    timeout -k 5 ${EMULATE_TIMEOUT:-150} env "$@" $B/cli/crystal emulate "$(config "$rank")" \
      --plugin "$PWD/$B/plugin/libnccl-net-crystal.so" -- \
      env RANK="$rank" NRANKS=64 ${TRACE:+CRYSTAL_TRACE_CONN="$OUT/trace-$name"} \
      "$PWD/$B/proto_check" --max "$max" --min "${MIN:-8}" \
      --ops "${OPS:-allreduce,allgather,broadcast,reducescatter,types}" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name: rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms"
  grep -E "BAD|proto_check rank|rror" "$OUT/$name.txt" | head -20
  grep -hE "data (mirror|zero|none)|WARN" "$OUT"/nccl-$name.*.log 2>/dev/null | head -5
  grep -hE "crystal: mirror from" "$OUT"/nccl-$name.*.log 2>/dev/null | head -8
  return $rc
}

export NCCL_DEBUG=${NCCL_DEBUG:-INFO}
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET,TUNING,ENV}
export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(build choices mirror zero none ll128)
rc_all=0
for c in "${cases[@]}"; do
  r=0
  if [ "$c" != build ] && ! { [ -x $B/proto_check ] && [ -x $B/cli/crystal ]; }; then
    build || exit 1
  fi
  case "$c" in
    build)   build || exit 1 ;;
    choices) run choices 0 "$MAX" CRYSTAL_DATA=mirror
             r=$?
             python3 $here/compare_choices.py 64 "$OUT"/nccl-choices.*.log | tee "$OUT/choices.txt" | tail -40
             r=$(( r | ${PIPESTATUS[0]} )) ;;
    mirror)  run mirror 5 "$MAX" CRYSTAL_DATA=mirror; r=$? ;;
    zero|none) run "$c" 5 "$MAX_OTHER" CRYSTAL_DATA="$c"; r=$? ;;
    ll128)   run ll128 0 "$MAX_OTHER" CRYSTAL_DATA=mirror NCCL_PROTO=LL,LL128,Simple; r=$?
             python3 $here/compare_choices.py 64 "$OUT"/nccl-ll128.*.log >"$OUT/choices-ll128.txt"
             r=$(( r | $? )); tail -1 "$OUT/choices-ll128.txt"
             echo "NCCL choices with LL128: $(cat "$OUT"/nccl-ll128.*.log | grep -c "proto LL128 channel")" ;;
    torch)   r=0
             for p in mirror zero none; do
               t0=$(date +%s%N)
               NCCL_DEBUG_FILE="$OUT/nccl-torch-$p.%h.%p.log" CRYSTAL_DATA=$p \
                 timeout -k 5 150 $B/cli/crystal emulate "$(config 5)" \
                 --plugin "$PWD/$B/plugin/libnccl-net-crystal.so" -- \
                 python3 $here/ddp_check.py >"$OUT/torch-$p.txt" 2>&1
               rt=$?
               echo "torch $p: rc=$rt wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms"
               grep -h "DDP_CHECK" "$OUT/torch-$p.txt" | head -3
               # mirror must pass; zero/none must fail by themselves (not the timeout: 124/137)
               if [ $p = mirror ]; then r=$(( r | (rt != 0) )); else r=$(( r | (rt == 0 || rt == 124 || rt == 137) )); fi
             done ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  rc_all=$(( rc_all | r ))
done
exit $rc_all
