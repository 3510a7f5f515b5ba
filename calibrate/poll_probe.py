"""``python -m calibrate.poll_probe``: how fast a busy-waiting MPI rank hands its core over.

The command's path; the module is ``calibrate.probes.poll_probe``.

Imports: calibrate.probes.poll_probe.
"""
import sys

from calibrate.probes.poll_probe import main

if __name__ == "__main__":
    sys.exit(main())
