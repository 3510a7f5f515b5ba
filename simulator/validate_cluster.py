"""``python -m simulator.validate_cluster``: the old path of ``python -m pipelines.validate_cluster``, which
runs the whole loop and so moved above the stages (issue 42); kept for a release.

Imports: cli (``hand_over``: runpy runs pipelines.validate_cluster as the program, and its usage
and error lines name ``python -m simulator.validate_cluster``, the program typed).
"""
from __future__ import annotations

import sys

import cli

if __name__ == "__main__":
    sys.exit(cli.hand_over("pipelines.validate_cluster",
                           typed="python -m simulator.validate_cluster"))
