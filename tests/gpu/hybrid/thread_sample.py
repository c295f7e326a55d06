#!/usr/bin/env python3
"""Which CPUs the real rank's threads use while it runs, and whether busy ones share a CPU.

    python3 tests/gpu/hybrid/thread_sample.py PATTERN OUT.txt [--every-ms 100]

Samples every thread of each process whose command line contains PATTERN (the real rank's
program, e.g. "hybrid_nccl --ops") until it is sent SIGTERM or SIGINT, then writes to OUT.txt
and stdout a summary: per thread (name, tid) the CPU share between samples (from
/proc/PID/task/TID/stat utime + stime), the CPUs it last ran on, its allowed CPU list; and
every sample where two busy threads (>= 50 % of a CPU over the interval) were last seen on
the same CPU; and per thread the time it spent runnable but waiting for a CPU (the run-queue
wait of /proc/PID/task/TID/schedstat, total and the most in one interval) and its involuntary
context switches and minor page faults (first touches of new memory: a thread that grows a
table a page at a time stalls so). run_device.sh runs it when SAMPLE_THREADS=1 (the
thirty-seventh session's 4-5 ms stalls: a thread off a CPU for a time slice, or not?);
SAMPLE_EVERY_MS sets the interval.
"""
import collections
import os
import signal
import sys
import time

BUSY = 0.5  # share of a CPU over one interval that makes a thread busy

# One thread at one sample. wait_ns: run-queue wait so far, -1 where the kernel keeps no
# schedstat; invol: involuntary context switches; minflt: minor page faults.
Thread = collections.namedtuple("Thread", "name ticks cpu state allowed wait_ns invol minflt")


def read_thread(pid, tid):
    """A Thread (ticks: utime + stime; cpu: the last it ran on), or None when gone."""
    base = f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{base}/stat") as f:
            stat = f.read()
        with open(f"{base}/status") as f:
            status = dict(l.split(":", 1) for l in f if ":" in l)
    except OSError:
        return None
    try:
        with open(f"{base}/schedstat") as f:
            wait_ns = int(f.read().split()[1])  # on-CPU ns, run-queue wait ns, time slices
    except (OSError, IndexError, ValueError):
        wait_ns = -1
    allowed = status.get("Cpus_allowed_list", "?").strip()
    invol = int(status.get("nonvoluntary_ctxt_switches", "0").strip() or 0)
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    rest = stat[stat.rindex(")") + 2:].split()  # fields from 3 (state) on
    state, ticks, cpu, minflt = rest[0], int(rest[11]) + int(rest[12]), int(rest[36]), int(rest[7])
    return Thread(name, ticks, cpu, state, allowed, wait_ns, invol, minflt)


def summarise(samples, hz):
    """samples: [(t_seconds, {(pid, tid): Thread})] -> lines."""
    share = collections.defaultdict(list)
    waits = collections.defaultdict(list)  # run-queue wait ns per interval, where known
    invol = collections.Counter()
    faults = collections.defaultdict(list)  # minor page faults per interval
    cpus = collections.defaultdict(collections.Counter)
    info = {}
    shared = []
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        busy_on = collections.defaultdict(list)
        for key, now in b.items():
            info[key] = (now.name, now.allowed)
            cpus[key][now.cpu] += 1
            before = a.get(key)
            if before is None:
                continue  # born between the samples: nothing to compare yet
            if now.wait_ns >= 0 and before.wait_ns >= 0:
                waits[key].append(now.wait_ns - before.wait_ns)
            invol[key] += now.invol - before.invol
            faults[key].append(now.minflt - before.minflt)
            if t1 > t0:
                s = (now.ticks - before.ticks) / hz / (t1 - t0)
                share[key].append(s)
                if s >= BUSY:
                    busy_on[now.cpu].append(f"{now.name}/{key[1]}")
        for cpu, names in sorted(busy_on.items()):
            if len(names) > 1:
                shared.append(f"t={t1 - samples[0][0]:.2f}s cpu {cpu}: {', '.join(names)}")
    lines = [f"{len(samples)} samples, {len(info)} threads"]
    for key in sorted(info, key=lambda k: -max(share[k], default=0)):
        s = share[key]
        if not s or max(s) < 0.05:
            continue
        name, allowed = info[key]
        top = ", ".join(f"{c}x{n}" for c, n in cpus[key].most_common(3))
        w = waits[key]
        rq = (f"run-queue wait {sum(w) / 1e6:.1f} ms (most in one interval {max(w) / 1e6:.1f})"
              if w else "run-queue wait ?")
        f = faults[key]
        lines.append(f"  {name}/{key[1]}: cpu share mean {sum(s) / len(s):.2f} max {max(s):.2f}, "
                     f"on cpus {top}, allowed {allowed}; {rq}, {invol[key]} involuntary switches, "
                     f"{sum(f)} minor faults (most in one interval {max(f, default=0)})")
    lines.append(f"busy threads sharing a CPU: {len(shared)} sample(s)")
    lines += ["  " + x for x in shared[:20]]
    return lines


def matching_pids(pattern):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern in cmd:
            out.append(int(d))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    pattern, out = sys.argv[1], sys.argv[2]
    every = float(sys.argv[sys.argv.index("--every-ms") + 1]) / 1e3 if "--every-ms" in sys.argv else 0.1
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    samples = []
    while not stop:
        snap = {}
        for pid in matching_pids(pattern):
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                r = read_thread(pid, int(tid))
                if r:
                    snap[(pid, int(tid))] = r
        if snap:
            samples.append((time.monotonic(), snap))
        time.sleep(every)
    text = "\n".join(summarise(samples, os.sysconf("SC_CLK_TCK")))
    with open(out, "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
