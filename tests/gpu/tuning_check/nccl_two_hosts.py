#!/usr/bin/env python3
"""One rank of a 2-"node" NCCL communicator on one GPU (NCCL_HOSTID differs per process).

NCCL prints its tuning tables (graph/tuning.cc:ncclTopoTuneModel) at communicator init when
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS includes TUNING. We also time all-reduce over a few sizes
so the log holds measured times next to NCCL's estimates.
"""
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("nccl", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    torch.cuda.set_device(0)
    for size in (1 << 10, 1 << 16, 1 << 20, 1 << 24):
        x = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        iters = 20
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) / iters * 1e6
        if rank == 0:
            print(f"CRYSTAL_MEASURED allreduce bytes={size} time_us={us:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
