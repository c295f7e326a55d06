#!/usr/bin/env python3
"""Checks the graph `crystal record` wrote from a PyTorch run against what the run measured.

  compare.py GRAPH.json RUN_DIR RANK [PROGRAM_LOG]

* Compute: in issue order, the kernels (and memcpy/memset, any stream) between two NCCL
  kernels form a compute segment. The segments are rebuilt here from the Kineto trace itself
  (launch order from the runtime calls' correlation ids; NCCL kernels known by their
  metadata or name) and compared with the runs of Compute ops between communication ops of
  rank RANK's class in the graph: same number of segments, each within 2 %, and no NCCL
  kernel counted as compute.
* Memory: the graph's peak (largest running Alloc - Free) equals the pyrun file's
  max_memory_allocated, and the program's own torch.cuda.max_memory_allocated print
  (RESULT ... peak_mem_bytes=N in PROGRAM_LOG, tests/gpu/pytorch/train_gpt.py) when given.
Prints one line per check and a summary; exit status 1 if any check fails.
"""
import json
import os
import re
import sys

TOLERANCE = 0.02
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def is_nccl(event):
    return "Collective name" in event.get("args", {}) or event["name"].startswith("ncclDevKernel") \
        or event["name"].startswith("ncclKernel")


def trace_segments(trace):
    """Segment sums (us) in issue order, and the NCCL kernel names, from the Kineto trace.

    Issue order is the CPU time of the launching runtime call (same args.correlation)."""
    launch = {}
    for e in trace["traceEvents"]:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launch[e["args"]["correlation"]] = float(e["ts"])
    gpu = [(launch.get(e["args"].get("correlation"), float(e["ts"])), i, e)
           for i, e in enumerate(trace["traceEvents"])
           if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    gpu.sort(key=lambda t: (t[0], t[1]))
    segments, nccl_names, current = [], set(), None
    for _, _, e in gpu:
        if is_nccl(e):
            nccl_names.add(e["name"])
            if current is not None:
                segments.append(current)
            current = None
        else:
            current = (current or 0.0) + float(e["dur"])
    if current is not None:
        segments.append(current)
    return segments, nccl_names


def graph_segments(ops):
    """Segment sums (us): runs of Compute ops between communication ops, in op order."""
    segments, current = [], None
    for op in ops:
        if op["kind"] == "compute":
            current = (current or 0.0) + op["us"]
        elif op["kind"] in ("collective", "send", "recv") and current is not None:
            segments.append(current)
            current = None
    if current is not None:
        segments.append(current)
    return segments


def graph_peak(ops):
    mem = peak = 0
    for op in ops:
        if op["kind"] == "alloc":
            mem += op["bytes"]
        elif op["kind"] == "free":
            mem -= min(mem, op["bytes"])
        peak = max(peak, mem)
    return peak


def main():
    graph_path, run_dir, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log = sys.argv[4] if len(sys.argv) > 4 else None
    with open(graph_path) as f:
        graph = json.load(f)
    with open(os.path.join(run_dir, "rank%d.pyrun.json" % rank)) as f:
        pyrun = json.load(f)
    with open(os.path.join(run_dir, pyrun["kineto_trace"])) as f:
        trace = json.load(f)
    # Rank RANK's class: with no pipeline stages every rank is class 0; the checks below use
    # the recorded rank of a PP=1 target.
    ops = graph["classes"][0]
    kinds = {}
    for op in ops:
        kinds[op["kind"]] = kinds.get(op["kind"], 0) + 1
    print("graph class 0: %d ops %s" % (len(ops), json.dumps(kinds, sort_keys=True)))
    failures = []

    want, nccl_names = trace_segments(trace)
    got = graph_segments(ops)
    worst = 0.0
    if len(want) != len(got):
        failures.append("%d compute segments in the trace, %d in the graph" % (len(want), len(got)))
    for a, b in zip(want, got):
        worst = max(worst, abs(b - a) / a if a > 0 else abs(b - a))
    nccl_as_compute = [op.get("name", "") for op in ops if op["kind"] == "compute"
                       and op.get("name", "") in nccl_names]
    if nccl_as_compute:
        failures.append("%d NCCL kernels are Compute ops in the graph (%s)"
                        % (len(nccl_as_compute), nccl_as_compute[0]))
    if worst > TOLERANCE:
        failures.append("a compute segment differs by %.3f %% (> 2 %%)" % (100 * worst))
    print("COMPUTE segments trace=%d graph=%d trace_us=%.1f graph_us=%.1f worst_segment_err=%.4f%%"
          % (len(want), len(got), sum(want), sum(got), 100 * worst))

    peak = graph_peak(ops)
    allocated = pyrun["max_memory_allocated"]
    print("MEMORY graph_peak=%d pyrun_max_memory_allocated=%d max_memory_reserved=%d"
          % (peak, allocated, pyrun["max_memory_reserved"]))
    if peak != allocated:
        failures.append("graph peak %d != max_memory_allocated %d" % (peak, allocated))
    if log:
        with open(log) as f:
            printed = re.findall(r"^RESULT rank=%d .*peak_mem_bytes=(\d+)" % rank, f.read(), re.M)
        if not printed:
            failures.append("%s: no RESULT line with peak_mem_bytes for rank %d" % (log, rank))
        elif int(printed[-1]) != peak:
            failures.append("graph peak %d != the program's max_memory_allocated %s"
                            % (peak, printed[-1]))
        else:
            print("MEMORY program_max_memory_allocated=%s (equal)" % printed[-1])

    steps = pyrun["steps"]
    print("STEPS n=%d gpu_ms=%s" % (len(steps), [None if s["gpu_ms"] is None else round(s["gpu_ms"], 3)
                                                 for s in steps]))
    for line in failures:
        print("FAIL " + line)
    print("RECORD CHECK " + ("FAILED" if failures else "PASSED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
