"""``python -m calibrate.estimate``: what a calibration will cost, each stage's expected seconds.

The command's path; the module is ``calibrate.probes.estimate``.

Imports: calibrate.probes.estimate.
"""
import sys

from calibrate.probes.estimate import main

if __name__ == "__main__":
    sys.exit(main())
