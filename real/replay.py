"""``python -m real.replay``: train the real model in one process along a simulated update schedule.

The command's path; the module is ``real.training.replay``.

Imports: real.training.replay.
"""
import sys

from real.training.replay import main

if __name__ == "__main__":
    sys.exit(main())
