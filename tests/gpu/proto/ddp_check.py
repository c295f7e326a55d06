#!/usr/bin/env python3
"""PyTorch under `crystal emulate`: DDP construction, all_gather_object and a broadcast from
rank 0 (virtual when emulation.real_ranks does not hold 0), with the data policy of
CRYSTAL_DATA (docs/plugin.md "Data policy and protocols").

mirror: must succeed. DDP's parameter check (an all-gather of shapes) sees copies of the
        real rank's model (its metadata broadcast from rank 0 keeps the real rank's own data:
        plugin/mirror_result.h); all_gather_object returns copies of the real rank's
        object; the tensor broadcast from a virtual root leaves the real rank's tensor (0 zeros);
        all_reduce of 3s gives 3 * world, and DDP's averaged gradient equals the real rank's
        own (every rank a copy of it: the interposer's exact mirror results).
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
        s = torch.full((4096,), 3.0, device="cuda")
        dist.all_reduce(s)
        sum_wrong = int((s != 3.0 * world).sum().item())
        x = torch.randn(16, 64, device="cuda")
        local = [p.detach().clone() for p in model.parameters()]
        ref = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                  torch.nn.Linear(32, 8)).cuda()
        with torch.no_grad():
            for r, p in zip(ref.parameters(), local):
                r.copy_(p)
        ref(x).sum().backward()  # this rank's own gradient, no communication
        loss = ddp(x).sum()
        loss.backward()  # one gradient all-reduce through the emulated world
        torch.cuda.synchronize()
        grad_err = max(float((p.grad - r.grad).abs().max().item())
                       for p, r in zip(model.parameters(), ref.parameters()))
        what = (f"all_gather_object {copies}/{world} copies of this rank's object, broadcast "
                f"from rank 0: {zeros}/1024 zeros, all_reduce of 3s: {sum_wrong}/4096 not "
                f"{3 * world}, DDP gradient vs own: max |diff| {grad_err:.3g}")
        if policy == "mirror" and (copies != world or zeros or sum_wrong or grad_err > 1e-5):
            raise RuntimeError(f"mirror: results are not those of copies of this rank: {what}")
        print(f"DDP_CHECK ok rank {rank}/{world} data {policy}: {what}", flush=True)
        dist.destroy_process_group()
        return 0
    except Exception as e:  # the check wants PyTorch's own message, then a clean exit
        print(f"DDP_CHECK failed rank {rank}/{world} data {policy}: "
              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
