"""``python -m calibrate.sched_probe``: the scheduler's time slice, two busy processes on one core.

The command's path; the module is ``calibrate.probes.sched_probe``.

Imports: calibrate.probes.sched_probe.
"""
import sys

from calibrate.probes.sched_probe import main

if __name__ == "__main__":
    sys.exit(main())
