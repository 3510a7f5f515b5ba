"""``python -m real.train``: train one model with one scheme and write a run record.

The command's path; the module is ``real.launch.train`` (``launched_main``: the rank runs
under its recorder, ``real.launch.supervise``).

Imports: real.launch.train.
"""
import sys

from real.launch.train import launched_main

if __name__ == "__main__":
    sys.exit(launched_main())
