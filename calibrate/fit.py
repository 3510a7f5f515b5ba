"""``python -m calibrate.fit``: raw probes (+ run records) -> one versioned profile.

The command's path; the module is ``calibrate.fits.fit``.

Imports: calibrate.fits.fit.
"""
import sys

from calibrate.fits.fit import main

if __name__ == "__main__":
    sys.exit(main())
