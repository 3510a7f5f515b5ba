"""``python -m calibrate.workload``: a workload file from a real PyTorch model.

The command's path; the module is ``calibrate.probes.workload``.

Imports: calibrate.probes.workload.
"""
import sys

from calibrate.probes.workload import main

if __name__ == "__main__":
    sys.exit(main())
