#!/usr/bin/env python3
"""p2p_trace.py's comparison of the agent's marks with NCCL's kernel-channel stamps (K/k rows,
CRYSTAL_KERNEL_CH=1) on a hand-made trace (CTest: hybrid_p2p_trace_python): the i-th S/D
against the i-th collective NCCL stamped, by the earliest start stamp; exact values."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Two broadcasts of 1 MiB. Times in ns. The second collective's K rows come first in the file
# (the pacing thread drains them in batches): order is by the stamps, not the rows. A stamp of
# a collective without identity (value 0) is left out.
TRACE = """t_ns,kind,conn,dir,ordinal,value,due_ns,gpu_ns,func
1010000,S,-1,-,-1,0,1048576,-1,Broadcast
1030000,D,-1,-,-1,5,-1,-1,-
1040000,S,-1,-,-1,1,1048576,-1,Broadcast
1062000,D,-1,-,-1,9,-1,-1,-
1045000,K,-1,-,-1,8,1,1039000,-
1044000,K,-1,-,-1,8,0,1038000,-
1061000,k,-1,-,-1,8,0,1058000,-
1061000,k,-1,-,-1,8,1,1059000,-
1009000,K,-1,-,-1,7,0,1006000,-
1010500,K,-1,-,-1,7,1,1007000,-
1029000,k,-1,-,-1,7,0,1026000,-
1029000,k,-1,-,-1,7,1,1027000,-
1000000,K,-1,-,-1,0,3,900000,-
"""


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tp.csv")
        with open(path, "w") as f:
            f.write(TRACE)
        p = subprocess.run([sys.executable, os.path.join(HERE, "p2p_trace.py"), path, "--each"],
                           capture_output=True, text=True, check=True)
    lines = p.stdout.splitlines()
    want_head = ("NCCL's kernel-channel stamps: 2 collectives, 2 operations marked by the agent; "
                 "compared in order: 2")
    # #0: S 1010.0 - kstart 1006.0 = 4.0, D 1030.0 - kend 1027.0 = 3.0, deliver 1009.0 - 1006.0
    # = 3.0, kspan 21.0. #1: S 1040.0 - 1038.0 = 2.0, D 1062.0 - 1059.0 = 3.0, deliver 1044.0 -
    # 1038.0 = 6.0, kspan 21.0.
    want_rows = ["| Broadcast #0 | 4.0 | 3.0 | 3.0 | 21.0 |",
                 "| Broadcast #1 | 2.0 | 3.0 | 6.0 | 21.0 |"]
    if want_head not in lines or lines[-2:] != want_rows:
        print("p2p_trace.py printed:\n  " + "\n  ".join(lines) + "\nwanted:\n  " + want_head +
              "\n  ...\n  " + "\n  ".join(want_rows))
        return 1
    print("p2p_trace.py: kernel-channel stamps against the agent's marks, in stream order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
