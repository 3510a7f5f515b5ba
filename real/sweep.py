"""``python -m real.sweep``: run schemes for several worker counts, collect the records, plot
the speedup.

The command's path; the module is ``real.launch.sweep``.

Imports: real.launch.sweep.
"""
import sys

from real.launch.sweep import main

if __name__ == "__main__":
    sys.exit(main())
