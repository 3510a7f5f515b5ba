"""``python -m simulator.replay``: the old path of ``python -m pipelines.replay``, which trains
the real model along predicted schedules (``real.replay``) and so moved above the stages
(issue 42); kept for a release.

Imports: cli (``hand_over``: runpy runs pipelines.replay as the program, and its usage
and error lines name ``python -m simulator.replay``, the program typed).
"""
from __future__ import annotations

import sys

import cli

if __name__ == "__main__":
    sys.exit(cli.hand_over("pipelines.replay", typed="python -m simulator.replay"))
