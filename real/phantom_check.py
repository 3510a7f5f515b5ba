"""``python -m real.phantom_check``: a phantom run against the real run, time per iteration.

The command's path; the module is ``real.phantom.check``.

Imports: real.phantom.check.
"""
import sys

from real.phantom.check import main

if __name__ == "__main__":
    sys.exit(main())
