"""Per-iteration GPU and host times, the allocator's peaks and, in record mode, one
torch.profiler (Kineto) trace of iterations [warmup, warmup + steps), written at exit to
CRYSTAL_RUN_DIR/rank<RANK>.pyrun.json (format "crystal-pyrun-1", docs/record.md).

Iteration i ends when the first optimizer that ever stepped finishes its step i (PyTorch's
global optimizer step post hook, so a second optimizer in the same loop does not split
iterations); iteration 0 starts at the first forward of any nn.Module (a global forward
pre hook, removed after that call). At each mark a CUDA event is recorded on the current
stream; events are only read at exit, so the program never waits for them.

Nothing here resets the allocator's peak counters: the program reads what it would read
without crystal.
"""
import atexit
import importlib
import json
import os
import time

from . import warn

FORMAT = "crystal-pyrun-1"
EVENT_WAIT_S = 10


def _env_int(name, default, minimum):
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        warn.once("%s=%r is not an integer; using %d" % (name, text, default))
        return default
    if value < minimum:
        warn.once("%s=%d is below %d; using %d" % (name, value, minimum, minimum))
        return minimum
    return value


class Recorder:
    @classmethod
    def from_environment(cls, torch):
        profile = os.environ.get("CRYSTAL_RECORD_PROFILE", "") not in ("", "0")
        return cls(torch, os.environ["CRYSTAL_RUN_DIR"], profile,
                   _env_int("CRYSTAL_PROFILE_WARMUP", 2, 1), _env_int("CRYSTAL_PROFILE_STEPS", 1, 1))

    def __init__(self, torch, run_dir, profile, warmup, steps):
        self._torch = torch
        self._run_dir = run_dir
        self._profile = profile
        self._warmup = warmup
        self._profile_steps = steps
        self._leader = None      # id of the optimizer whose steps end iterations
        self._marks = []         # (host seconds, CUDA event or None); mark 0 = first forward
        self._first_forward = None
        self._prof = None
        self._prof_done = False
        self._stopped = None  # the stopped profiler, exported at exit

    def start(self):
        torch = self._torch
        # Import the submodules by name: the hooks go in while the program's own `import
        # torch` is still running, before torch.optim / torch.nn are attributes of torch
        # (seen on the H200: "module 'torch.optim' has no attribute 'optimizer'").
        optimizer = importlib.import_module("torch.optim.optimizer")
        optimizer.register_optimizer_step_post_hook(self._on_step)
        try:
            module = importlib.import_module("torch.nn.modules.module")
            self._first_forward = module.register_module_forward_pre_hook(
                self._on_first_forward)
        except Exception as err:  # iteration 0 then has no start
            warn.once("no start mark for iteration 0", err)
        atexit.register(self._at_exit)

    # --- marks -----------------------------------------------------------------------------

    def _cuda_event(self):
        cuda = self._torch.cuda
        if not (cuda.is_available() and cuda.is_initialized()):
            return None
        event = cuda.Event(enable_timing=True)
        event.record()
        return event

    def _on_first_forward(self, module, args):
        try:
            handle, self._first_forward = self._first_forward, None
            if handle is not None:
                handle.remove()
                if not self._marks:
                    self._marks.append((time.perf_counter(), self._cuda_event()))
        except Exception as err:
            warn.once("no start mark for iteration 0", err)

    def _on_step(self, optimizer, args, kwargs):
        try:
            if self._leader is None:
                self._leader = id(optimizer)
                if self._first_forward is not None:  # no forward seen: iteration 0 unknown
                    self._first_forward.remove()
                    self._first_forward = None
                if not self._marks:
                    self._marks.append(None)
            elif id(optimizer) != self._leader:
                return
            self._marks.append((time.perf_counter(), self._cuda_event()))
            if self._profile:
                self._profile_window(len(self._marks) - 1)
        except Exception as err:
            warn.once("step timing", err)

    def _profile_window(self, done):
        """`done` iterations have finished: trace iterations [warmup, warmup + steps)."""
        if self._prof is None and not self._prof_done and done == self._warmup:
            self._prof = self._start_profiler()
        elif self._prof is not None:
            if done == self._warmup + self._profile_steps:
                self._stop_profiler()
            else:
                self._prof.step()

    def _start_profiler(self):
        torch = self._torch
        kwargs = {
            "activities": [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            "profile_memory": True,  # [memory] events with the allocator's running total
        }
        try:  # "Stream Wait Event" records: the dependencies between streams
            kwargs["experimental_config"] = torch._C._profiler._ExperimentalConfig(
                enable_cuda_sync_events=True)
        except Exception as err:
            warn.once("profiler without stream-wait events", err)
        prof = torch.profiler.profile(**kwargs)
        prof.start()
        return prof

    def _stop_profiler(self):
        prof, self._prof = self._prof, None
        self._prof_done = True
        prof.stop()
        self._stopped = prof  # exported at exit: the export would delay the next iteration

    # --- exit ------------------------------------------------------------------------------

    def _rank_world(self):
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        try:
            dist = self._torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank = dist.get_rank() if rank is None else rank
                world = dist.get_world_size() if world is None else world
        except Exception:
            pass
        return int(rank or 0), int(world or 1)

    def _events_done(self):
        """Waits (bounded: a hung GPU must not hang the exit too) for the last event."""
        last = next((m[1] for m in reversed(self._marks) if m is not None and m[1] is not None),
                    None)
        deadline = time.monotonic() + EVENT_WAIT_S
        while last is not None and not last.query():
            if time.monotonic() > deadline:
                warn.once("the GPU did not reach the last step's event in %d s: no GPU times"
                          % EVENT_WAIT_S)
                return False
            time.sleep(0.001)
        return True

    def _steps(self):
        steps = []
        done = self._events_done()
        for start, end in zip(self._marks, self._marks[1:]):
            if start is None:
                steps.append({"gpu_ms": None, "host_ms": None})
                continue
            gpu = None
            if done and start[1] is not None and end[1] is not None:
                gpu = start[1].elapsed_time(end[1])
            steps.append({"gpu_ms": gpu, "host_ms": (end[0] - start[0]) * 1e3})
        return steps

    def _memory(self):
        cuda = self._torch.cuda
        if not (cuda.is_available() and cuda.is_initialized()):
            return 0, 0
        return int(cuda.max_memory_allocated()), int(cuda.max_memory_reserved())

    def _nccl(self):
        try:
            v = self._torch.cuda.nccl.version()
            return [int(x) for x in v] if isinstance(v, (tuple, list)) else None
        except Exception:
            return None

    def _export_trace(self, rank):
        if self._prof is not None:  # the program ended inside the window
            warn.once("the program ended before iteration %d: the trace holds fewer steps"
                      % (self._warmup + self._profile_steps))
            self._stop_profiler()
        prof = self._stopped
        if prof is None:
            if self._profile:
                warn.once("no trace: the program ran %d iterations, tracing starts after %d"
                          % (max(len(self._marks) - 1, 0), self._warmup))
            return None
        name = "rank%d.kineto.json" % rank
        prof.export_chrome_trace(os.path.join(self._run_dir, name))
        return name

    def _at_exit(self):
        try:
            if not self._marks and not self._torch.cuda.is_initialized():
                return  # not a training process (launcher, helper)
            rank, world = self._rank_world()
            trace = None
            try:
                trace = self._export_trace(rank)
            except Exception as err:
                warn.once("no trace", err)
            allocated, reserved = self._memory()
            doc = {
                "format": FORMAT,
                "rank": rank,
                "world_size": world,
                "pid": os.getpid(),
                "steps": self._steps(),
                "max_memory_allocated": allocated,
                "max_memory_reserved": reserved,
                "kineto_trace": trace,
                "torch": str(self._torch.__version__),
                "nccl": self._nccl(),
            }
            path = os.path.join(self._run_dir, "rank%d.pyrun.json" % rank)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
        except Exception as err:
            warn.once("rank file not written", err)
