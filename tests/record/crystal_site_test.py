#!/usr/bin/env python3
"""python/crystal_site (sitecustomize + crystal_pyrun) against a fake torch
(tests/record/pyrun_fake_torch/): what it writes, its profiler window, that it chains to a
hidden sitecustomize, and that no failure stops the program.

Run by ctest: crystal_site_test.py SOURCE_DIR. Each case starts a fresh python3 with
PYTHONPATH=<crystal_site>:<fake torch>, as `crystal record` would.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SOURCE = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                         os.path.join(os.path.dirname(__file__), "..", ".."))
# Optional: the built crystal and plugin, for `crystal record` end to end.
CRYSTAL = sys.argv.pop(1) if len(sys.argv) > 1 else ""
PLUGIN = sys.argv.pop(1) if len(sys.argv) > 1 else ""
SITE = os.path.join(SOURCE, "python", "crystal_site")
FAKE_TORCH = os.path.join(SOURCE, "tests", "record", "pyrun_fake_torch")

# Five iterations of 10, 11, 12, 13, 14 GPU ms; a second optimizer steps in the same loop.
TRAIN = textwrap.dedent("""
    import torch
    model = torch.nn.Module()
    opt, opt2 = torch.optim.optimizer.Optimizer(), torch.optim.optimizer.Optimizer()
    torch.cuda._set_peaks(123456789, 200000000)
    for i in range(5):
        model()
        torch.cuda._advance(10.0 + i)
        opt.step()
        opt2.step()
    print("trained")
""")


class CrystalSiteTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.run_dir = os.path.join(self.tmp, "run")
        os.mkdir(self.run_dir)

    def tearDown(self):
        self._tmp.cleanup()

    def run_py(self, code, extra_path=(), **env):
        script = os.path.join(self.tmp, "prog.py")
        with open(script, "w") as f:
            f.write(code)
        full = {k: v for k, v in os.environ.items()
                if not k.startswith("CRYSTAL_") and k not in ("RANK", "WORLD_SIZE")}
        full["PYTHONPATH"] = os.pathsep.join([SITE, FAKE_TORCH, *extra_path])
        full.update(env)
        return subprocess.run([sys.executable, script], env=full, capture_output=True,
                              text=True, timeout=30)

    def pyrun(self, rank=0):
        with open(os.path.join(self.run_dir, "rank%d.pyrun.json" % rank)) as f:
            return json.load(f)

    def test_writes_steps_memory_and_versions(self):
        p = self.run_py(TRAIN, CRYSTAL_RUN_DIR=self.run_dir, RANK="3", WORLD_SIZE="64")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "trained\n")
        self.assertEqual(p.stderr, "")
        doc = self.pyrun(3)
        self.assertEqual(sorted(doc), sorted(["format", "rank", "world_size", "pid", "steps",
                                              "max_memory_allocated", "max_memory_reserved",
                                              "kineto_trace", "torch", "nccl"]))
        self.assertEqual(doc["format"], "crystal-pyrun-1")
        self.assertEqual((doc["rank"], doc["world_size"]), (3, 64))
        self.assertEqual([s["gpu_ms"] for s in doc["steps"]], [10.0, 11.0, 12.0, 13.0, 14.0])
        self.assertTrue(all(s["host_ms"] >= 0 for s in doc["steps"]))
        self.assertEqual(doc["max_memory_allocated"], 123456789)
        self.assertEqual(doc["max_memory_reserved"], 200000000)
        self.assertIsNone(doc["kineto_trace"])  # not in record mode
        self.assertEqual(doc["torch"], "2.11.0+fake")
        self.assertEqual(doc["nccl"], [2, 28, 9])
        self.assertEqual(os.listdir(self.run_dir), ["rank3.pyrun.json"])

    def test_profiles_the_window_after_warmup(self):
        p = self.run_py(TRAIN, CRYSTAL_RUN_DIR=self.run_dir, CRYSTAL_RECORD_PROFILE="1",
                        CRYSTAL_PROFILE_WARMUP="2", CRYSTAL_PROFILE_STEPS="2")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = self.pyrun(0)
        self.assertEqual(doc["kineto_trace"], "rank0.kineto.json")
        with open(os.path.join(self.run_dir, doc["kineto_trace"])) as f:
            log = json.load(f)["fake_profiler_log"]
        # steps_done counts both optimizers: iteration i ends at 2 * (i + 1). Iterations 2 and
        # 3 traced: start after iteration 1 (4 steps), one step() mark, stop after iteration 3.
        self.assertEqual(log, [["init", ["CPU", "CUDA"], True, True],
                               ["start", 3], ["step", 5], ["stop", 7]])

    def test_program_ending_inside_the_window_still_exports(self):
        p = self.run_py(TRAIN, CRYSTAL_RUN_DIR=self.run_dir, CRYSTAL_RECORD_PROFILE="1",
                        CRYSTAL_PROFILE_WARMUP="4", CRYSTAL_PROFILE_STEPS="3")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ended before iteration 7", p.stderr)
        self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
        self.assertEqual(self.pyrun(0)["kineto_trace"], "rank0.kineto.json")

    def test_nothing_without_run_dir(self):
        p = self.run_py(TRAIN)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "trained\n", ""))
        self.assertEqual(os.listdir(self.run_dir), [])

    def test_nothing_from_a_process_without_torch(self):
        p = self.run_py("import sys\nprint('torch' in sys.modules)\n",
                        CRYSTAL_RUN_DIR=self.run_dir)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "False\n", ""))
        self.assertEqual(os.listdir(self.run_dir), [])

    def test_chains_to_the_hidden_sitecustomize(self):
        user = os.path.join(self.tmp, "user_site")
        os.mkdir(user)
        with open(os.path.join(user, "sitecustomize.py"), "w") as f:
            f.write("import builtins\nbuiltins.USER_SITE_RAN = True\n")
        p = self.run_py("import builtins\nprint(getattr(builtins, 'USER_SITE_RAN', False))\n",
                        extra_path=[user], CRYSTAL_RUN_DIR=self.run_dir)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "True\n", ""))

    def test_broken_torch_is_one_warning(self):
        broken = os.path.join(self.tmp, "broken")
        os.makedirs(os.path.join(broken, "torch"))
        with open(os.path.join(broken, "torch", "__init__.py"), "w") as f:
            f.write("__version__ = 'x'\n")  # no optim, no cuda
        p = self.run_py("import torch\nprint('still running')\n", extra_path=[],
                        CRYSTAL_RUN_DIR=self.run_dir,
                        PYTHONPATH=os.pathsep.join([SITE, broken]))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "still running\n")
        self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
        self.assertTrue(p.stderr.startswith("crystal: warning: step timing off"), p.stderr)

    def test_unwritable_run_dir_is_one_warning(self):
        p = self.run_py(TRAIN, CRYSTAL_RUN_DIR=os.path.join(self.tmp, "missing", "dir"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "trained\n")
        self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
        self.assertIn("rank file not written", p.stderr)

    def test_bad_window_settings_fall_back(self):
        p = self.run_py(TRAIN, CRYSTAL_RUN_DIR=self.run_dir, CRYSTAL_RECORD_PROFILE="1",
                        CRYSTAL_PROFILE_WARMUP="two")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("CRYSTAL_PROFILE_WARMUP='two' is not an integer; using 2", p.stderr)
        self.assertEqual(self.pyrun(0)["kineto_trace"], "rank0.kineto.json")


    @unittest.skipUnless(CRYSTAL and PLUGIN, "needs the built crystal and plugin")
    def test_crystal_record_puts_trace_and_peak_into_the_graph(self):
        # Two processes, ranks 0 and 4 of config/examples/dense-8gpu.yaml (two pipeline
        # stages), each "profiling" the shipped trace of its rank. crystal record must find
        # crystal_site beside itself (no PYTHONPATH entry for it here).
        peaks = {0: 20000000000, 4: 30000000000}
        prog = os.path.join(self.tmp, "rank.py")
        with open(prog, "w") as f:
            f.write(TRAIN.replace("123456789, 200000000",
                                  "int(__import__('os').environ['PEAK'])," * 2))
        data = os.path.join(SOURCE, "tests", "record", "data")
        shell = " & ".join(
            "RANK=%d PEAK=%d FAKE_KINETO_TRACE=%s/dense-8gpu.rank%d.kineto.json %s %s"
            % (r, p, data, r, sys.executable, prog) for r, p in peaks.items()) + "; wait"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRYSTAL_")}
        env.update(PYTHONPATH=FAKE_TORCH, WORLD_SIZE="8")
        graph = os.path.join(self.tmp, "g.json")
        p = subprocess.run([CRYSTAL, "record", os.path.join(SOURCE, "config", "examples",
                                                            "dense-8gpu.yaml"),
                            "-o", graph, "--json", "--dir", self.run_dir, "--plugin", PLUGIN,
                            "--", "sh", "-c", shell],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("rank0.pyrun.json: rank 0, 5 iterations", p.stdout)
        self.assertIn("transient allocation", p.stdout)
        with open(graph) as f:
            classes = json.load(f)["classes"]
        for cls, rank in ((0, 0), (1, 4)):
            mem = peak = 0
            for op in classes[cls]:
                mem += op["bytes"] if op["kind"] == "alloc" else 0
                mem -= op["bytes"] if op["kind"] == "free" else 0
                peak = max(peak, mem)
            self.assertEqual(peak, peaks[rank], "class %d" % cls)
            self.assertTrue(any(op["kind"] == "compute" for op in classes[cls]))


if __name__ == "__main__":
    unittest.main()
