"""``python -m calibrate.probe``: run one part of the micro-benchmarks, save the raw rows.

The command's path; the module is ``calibrate.probes.probe``.

Imports: calibrate.probes.probe.
"""
import sys

from calibrate.probes.probe import main

if __name__ == "__main__":
    sys.exit(main())
