"""``python -m calibrate.link``: fit the link of the emulated cluster, write a cluster TOML.

The command's path; the module is ``calibrate.probes.link``.

Imports: calibrate.probes.link.
"""
import sys

from calibrate.probes.link import main

if __name__ == "__main__":
    sys.exit(main())
