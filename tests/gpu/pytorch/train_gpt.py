#!/usr/bin/env python3
"""A small GPT trained with tensor parallelism (TP) inside each node-sized group and data
parallelism (DP) across them, written the plain PyTorch way, so that it runs unmodified
under `crystal emulate` (tests/gpu/pytorch/run_device.sh) and on a real cluster alike.

Process groups: init_process_group(device_id=...) (eager NCCL init) then a 2-D DeviceMesh
(dp, tp), which PyTorch 2.11 builds with one ncclCommSplit of the world per dimension.
TP: Megatron-style column/row-parallel attention and MLP (an all-reduce on the TP group in
forward and one in backward per block half). DP: one flat all-reduce of all gradients on
the DP group per step, divided by the DP size. barrier() before and after training.

Prints, on every rank:
  STEP rank=R step=S loss=L ms=T
  RESULT rank=R world=W tp=T dp=D steps=S loss_first=.. loss_last=.. finite=1
         iter_ms_median=.. iter_ms_steady=[..] peak_mem_bytes=.. params=..
and exits 0 if every loss was finite. With --trace-dir DIR (or $TRACE_DIR), the last step
(kept out of iter_ms_steady) is recorded with torch.profiler: DIR/rank<R>.json is its
Chrome/Perfetto timeline, and
  COMM rank=R step=S kernels_ms=.. nccl_ms=.. exposed_nccl_ms=..
gives the GPU time of NCCL kernels in that step and the part of it not overlapped by any
other kernel (exposed communication).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh


class _CopyToTP(torch.autograd.Function):
    """Identity forward; all-reduce of the input gradient over the TP group backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce of partial outputs over the TP group forward; identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class Block(nn.Module):
    def __init__(self, hidden, heads, tp, group):
        super().__init__()
        assert heads % tp == 0 and hidden % heads == 0
        self.group, self.heads = group, heads // tp
        self.head_dim = hidden // heads
        local = self.heads * self.head_dim
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * local)          # column-parallel
        self.proj = nn.Linear(local, hidden, bias=False)  # row-parallel
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden // tp)   # column-parallel
        self.fc2 = nn.Linear(4 * hidden // tp, hidden, bias=False)  # row-parallel

    def forward(self, x):
        b, s, _ = x.shape
        h = _CopyToTP.apply(self.ln1(x), self.group)
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        x = x + _ReduceFromTP.apply(self.proj(a), self.group)
        h = _CopyToTP.apply(self.ln2(x), self.group)
        x = x + _ReduceFromTP.apply(self.fc2(F.gelu(self.fc1(h))), self.group)
        return x


class GPT(nn.Module):
    def __init__(self, a, group):
        super().__init__()
        self.emb = nn.Embedding(a.vocab, a.hidden)
        self.pos = nn.Parameter(torch.zeros(a.seq, a.hidden))
        self.blocks = nn.ModuleList(Block(a.hidden, a.heads, a.tp, group) for _ in range(a.layers))
        self.ln = nn.LayerNorm(a.hidden)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def _merged(intervals):
    out = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def report_comm(prof, trace_dir, rank, step):
    """Writes the step's timeline and prints NCCL kernel time and its exposed part."""
    try:
        os.makedirs(trace_dir, exist_ok=True)
        path = os.path.join(trace_dir, f"rank{rank}.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
        kernels = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e.get("name", ""))
                   for e in events if e.get("cat") == "kernel" and "ts" in e]
        nccl = _merged([(b, e) for b, e, n in kernels if "nccl" in n.lower()])
        other = _merged([(b, e) for b, e, n in kernels if "nccl" not in n.lower()])
        nccl_us = sum(e - b for b, e in nccl)
        covered = 0.0
        for b, e in nccl:
            for ob, oe in other:
                covered += max(0.0, min(e, oe) - max(b, ob))
        busy_us = sum(e - b for b, e in _merged([(b, e) for b, e, _ in kernels]))
        print(f"COMM rank={rank} step={step} kernels_ms={busy_us / 1e3:.3f} "
              f"nccl_ms={nccl_us / 1e3:.3f} exposed_nccl_ms={(nccl_us - covered) / 1e3:.3f} "
              f"trace={path}", flush=True)
    except Exception as e:  # the timeline is a report, never a reason to fail training
        print(f"COMM rank={rank} step={step} unavailable: {type(e).__name__}: {e}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--trace-dir", default=os.environ.get("TRACE_DIR", ""))
    a = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    t0 = time.time()
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % a.tp == 0, f"world {world} not divisible by tp {a.tp}"
    dp = world // a.tp
    mesh = init_device_mesh("cuda", (dp, a.tp), mesh_dim_names=("dp", "tp"))
    tp_group, dp_group = mesh.get_group("tp"), mesh.get_group("dp")
    print(f"INIT rank={rank} world={world} tp={a.tp} dp={dp} init_s={time.time() - t0:.2f}",
          flush=True)
    dist.barrier()

    torch.manual_seed(1234)  # same weights on every rank (what a DP broadcast would give)
    model = GPT(a, tp_group).to(dev)
    params = [q for q in model.parameters()]
    opt = torch.optim.AdamW(params, lr=a.lr)
    g = torch.Generator(device=dev).manual_seed(1000 + rank // a.tp)  # DP replicas differ

    losses, times = [], []
    torch.cuda.reset_peak_memory_stats(dev)
    prof = None
    for step in range(a.steps):
        if a.trace_dir and step == a.steps - 1:  # last step: kept out of the steady times
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        torch.cuda.synchronize(dev)
        t = time.perf_counter()
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=g)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        flat = torch.cat([q.grad.view(-1) for q in params])
        dist.all_reduce(flat, group=dp_group)
        flat.div_(dp)
        off = 0
        for q in params:
            n = q.numel()
            q.grad.copy_(flat[off:off + n].view_as(q))
            off += n
        opt.step()
        torch.cuda.synchronize(dev)
        ms = (time.perf_counter() - t) * 1e3
        losses.append(loss.item())
        times.append(ms)
        print(f"STEP rank={rank} step={step} loss={losses[-1]:.4f} ms={ms:.2f}", flush=True)
        if prof is not None:
            prof.__exit__(None, None, None)
            report_comm(prof, a.trace_dir, rank, step)
            prof = None
    dist.barrier()
    steady = times[a.warmup:len(times) - (1 if a.trace_dir else 0)] or times
    finite = all(math.isfinite(x) for x in losses)
    print(f"RESULT rank={rank} world={world} tp={a.tp} dp={dp} steps={a.steps} "
          f"loss_first={losses[0]:.4f} loss_last={losses[-1]:.4f} finite={int(finite)} "
          f"iter_ms_median={statistics.median(steady):.2f} "
          f"iter_ms_steady=[{','.join(f'{x:.2f}' for x in steady)}] "
          f"peak_mem_bytes={torch.cuda.max_memory_allocated(dev)} "
          f"params={sum(q.numel() for q in params)}", flush=True)
    dist.destroy_process_group()
    return 0 if finite else 1


if __name__ == "__main__":
    sys.exit(main())
