#!/usr/bin/env python3
"""thread_sample.py's summary on hand-made samples (no GPU, no sampling)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import thread_sample  # noqa: E402

HZ = 100


def snap(**threads):
    """threads: name=(tid, ticks, cpu[, run-queue wait ns, involuntary switches, minor faults])
    -> one sample's dict for pid 7 (wait, switches and faults 0 where not given)."""
    out = {}
    for name, t in threads.items():
        wait_invol_faults = t[3:] + (0, 0, 0)[len(t) - 3:]
        out[(7, t[0])] = thread_sample.Thread(name, t[1], t[2], "R", "0-15", *wait_invol_faults)
    return out


class Summary(unittest.TestCase):
    def test_shares_and_a_shared_cpu(self):
        # Over each 1 s interval: proxy 100 ticks (1.0 CPU), pacer 60 (0.6), main 2 (0.02).
        # The proxy waits 1 ms then 4 ms for a CPU, is switched out 3 then 5 times, and
        # faults 2048 then 6 pages in.
        samples = [
            (0.0, snap(proxy=(11, 0, 3, 0, 10, 100), pacer=(12, 0, 5), main=(10, 0, 1))),
            (1.0, snap(proxy=(11, 100, 3, 1_000_000, 13, 2148), pacer=(12, 60, 5), main=(10, 2, 1))),
            (2.0, snap(proxy=(11, 200, 3, 5_000_000, 18, 2154), pacer=(12, 120, 3), main=(10, 4, 1))),
        ]
        lines = thread_sample.summarise(samples, HZ)
        self.assertEqual(lines[0], "3 samples, 3 threads")
        self.assertEqual(lines[1], "  proxy/11: cpu share mean 1.00 max 1.00, on cpus 3x2, allowed 0-15; "
                                   "run-queue wait 5.0 ms (most in one interval 4.0), 8 involuntary switches, "
                                   "2054 minor faults (most in one interval 2048)")
        self.assertEqual(lines[2], "  pacer/12: cpu share mean 0.60 max 0.60, on cpus 5x1, 3x1, allowed 0-15; "
                                   "run-queue wait 0.0 ms (most in one interval 0.0), 0 involuntary switches, "
                                   "0 minor faults (most in one interval 0)")
        # main (0.02 of a CPU) is left out; the second interval has both busy ones on CPU 3.
        self.assertEqual(lines[3], "busy threads sharing a CPU: 1 sample(s)")
        self.assertEqual(lines[4], "  t=2.00s cpu 3: proxy/11, pacer/12")
        self.assertEqual(len(lines), 5)

    def test_a_thread_born_between_samples_has_no_share_yet(self):
        samples = [(0.0, snap(main=(10, 0, 1))), (0.5, snap(main=(10, 50, 1), late=(13, 40, 2)))]
        lines = thread_sample.summarise(samples, HZ)
        self.assertEqual(lines, ["2 samples, 2 threads",
                                 "  main/10: cpu share mean 1.00 max 1.00, on cpus 1x1, allowed 0-15; "
                                 "run-queue wait 0.0 ms (most in one interval 0.0), 0 involuntary switches, "
                                 "0 minor faults (most in one interval 0)",
                                 "busy threads sharing a CPU: 0 sample(s)"])

    def test_reads_this_process_threads(self):
        r = thread_sample.read_thread(os.getpid(), os.getpid())
        self.assertIsNotNone(r)
        name, ticks, cpu, state, allowed, wait_ns, invol, minflt = r  # a Thread
        self.assertTrue(name)
        self.assertGreaterEqual(ticks, 0)
        self.assertGreaterEqual(cpu, 0)
        self.assertIn(state, "RSD")
        self.assertNotEqual(allowed, "?")
        self.assertGreaterEqual(invol, 0)
        self.assertGreater(minflt, 0)  # a running Python has touched pages
        self.assertGreaterEqual(wait_ns, -1)  # -1: this kernel keeps no schedstat

    def test_unknown_run_queue_wait_is_said_so(self):
        samples = [(0.0, snap(main=(10, 0, 1, -1, 0, 5))), (1.0, snap(main=(10, 100, 1, -1, 2, 9)))]
        self.assertEqual(thread_sample.summarise(samples, HZ)[1],
                         "  main/10: cpu share mean 1.00 max 1.00, on cpus 1x1, allowed 0-15; "
                         "run-queue wait ?, 2 involuntary switches, 4 minor faults (most in one interval 4)")


if __name__ == "__main__":
    unittest.main()
