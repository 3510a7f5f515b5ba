"""``python -m simulator.replay``: the old path of ``python -m pipelines.replay``, which trains
the real model along predicted schedules (``real.replay``) and so moved above the stages
(issue 42); kept for a release.

Imports: nothing (runpy runs pipelines.replay as the program).
"""
from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("pipelines.replay", run_name="__main__", alter_sys=True)
