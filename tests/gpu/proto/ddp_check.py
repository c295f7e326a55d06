#!/usr/bin/env python3
"""PyTorch under `crystal emulate`: DDP construction, all_gather_object and a broadcast from
rank 0 (virtual when emulation.real_ranks does not hold 0), with the data policy of
CRYSTAL_DATA (docs/plugin.md "Data policy and protocols").

mirror: must succeed. DDP's parameter check (an all-gather of shapes) sees copies of the
        real rank's model (its metadata broadcast from rank 0 keeps the real rank's own data:
        plugin/mirror_result.h); all_gather_object returns copies of the real rank's
        object; the tensor broadcast from a virtual root leaves the real rank's tensor (0 zeros).
zero / none: must fail with a clear Python exception from PyTorch's own checks (DDP shape
        verification or unpickling of empty objects), never hang.
Prints "DDP_CHECK ok ..." or "DDP_CHECK failed: <exception>" and exits 0 / 1.
"""
import os
import sys
import traceback

import torch
import torch.distributed as dist


def main():
    policy = os.environ.get("CRYSTAL_DATA", "mirror")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 8)).cuda()
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
        objs = [None] * world
        mine = {"rank": rank, "note": "crystal proto check", "shape": [64, 32, 8]}
        dist.all_gather_object(objs, mine)
        copies = sum(1 for o in objs if o == mine)
        t = torch.arange(1024, dtype=torch.float32, device="cuda") + 1
        dist.broadcast(t, src=0)
        zeros = int((t == 0).sum().item())
        loss = ddp(torch.randn(16, 64, device="cuda")).sum()
        loss.backward()  # one gradient all-reduce through the emulated world
        torch.cuda.synchronize()
        print(f"DDP_CHECK ok rank {rank}/{world} data {policy}: all_gather_object "
              f"{copies}/{world} copies of this rank's object, broadcast from rank 0: "
              f"{zeros}/1024 zeros, backward ok", flush=True)
        dist.destroy_process_group()
        return 0
    except Exception as e:  # the check wants PyTorch's own message, then a clean exit
        print(f"DDP_CHECK failed rank {rank}/{world} data {policy}: "
              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
