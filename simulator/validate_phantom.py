"""``python -m simulator.validate_phantom``: the old path of ``python -m pipelines.validate_phantom``, which
runs the whole loop and so moved above the stages (issue 42); kept for a release.

Imports: cli (``hand_over``: runpy runs pipelines.validate_phantom as the program, and its usage
and error lines name ``python -m simulator.validate_phantom``, the program typed).
"""
from __future__ import annotations

import sys

import cli

if __name__ == "__main__":
    sys.exit(cli.hand_over("pipelines.validate_phantom",
                           typed="python -m simulator.validate_phantom"))
