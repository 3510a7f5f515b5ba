"""``python -m simulator.validate_cluster``: the old path of ``python -m pipelines.validate_cluster``, which
runs the whole loop and so moved above the stages (issue 42); kept for a release.

Imports: nothing (runpy runs pipelines.validate_cluster as the program).
"""
from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("pipelines.validate_cluster", run_name="__main__", alter_sys=True)
