#!/usr/bin/env bash
# Captures NCCL 2.28.9's own tuning tables for 2 "nodes" x 1 GPU (two processes on the one
# H200 with different NCCL_HOSTID, NET transport = Socket), for comparison with our model
# (tests/model: model_tuning_table). Usage on the GPU machine: run.sh OUTDIR; then here:
#   build/tests/model/model_tuning_table 2 1 1.25 1 > ours.txt   # 2 nodes x 1 GPU, 10 Gb/s, PHB
#   tests/gpu/tuning_check/compare.py OUTDIR/rank0.log ours.txt
set -euo pipefail
out=${1:-${OUT:-.}}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' \
  | tee "$out/versions.txt"
common=(WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 NCCL_DEBUG=INFO
        NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING,NET,ENV)
for r in 0 1; do
  env "${common[@]}" RANK=$r NCCL_HOSTID=h$r timeout 180 python3 "$here/nccl_two_hosts.py" \
    >"$out/rank$r.log" 2>&1 &
done
wait
grep -h "CRYSTAL_MEASURED" "$out/rank0.log" || true
