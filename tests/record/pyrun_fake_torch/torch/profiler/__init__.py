"""Logs when it was started, stepped and stopped, counted in optimizer steps done. With
FAKE_KINETO_TRACE set, export_chrome_trace copies that file instead (a real trace for
crystal record to import)."""
import enum
import json
import os
import shutil

from .. import optim


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1


class profile:
    def __init__(self, activities=None, profile_memory=False, experimental_config=None):
        self._log = [["init", sorted(a.name for a in activities), profile_memory,
                      bool(experimental_config and experimental_config.enable_cuda_sync_events)]]

    def _at(self, what):
        self._log.append([what, optim.optimizer.steps_done])

    def start(self):
        self._at("start")

    def step(self):
        self._at("step")

    def stop(self):
        self._at("stop")

    def export_chrome_trace(self, path):
        if os.environ.get("FAKE_KINETO_TRACE"):
            shutil.copyfile(os.environ["FAKE_KINETO_TRACE"], path)
            return
        with open(path, "w") as f:
            json.dump({"fake_profiler_log": self._log}, f)
