"""``python -m calibrate.copy_probe``: the host's copies of a flat vector, into kept and new memory.

The command's path; the module is ``calibrate.probes.copy_probe``.

Imports: calibrate.probes.copy_probe.
"""
import sys

from calibrate.probes.copy_probe import main

if __name__ == "__main__":
    sys.exit(main())
