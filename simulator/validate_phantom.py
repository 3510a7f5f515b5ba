"""``python -m simulator.validate_phantom``: the old path of ``python -m pipelines.validate_phantom``, which
runs the whole loop and so moved above the stages (issue 42); kept for a release.

Imports: nothing (runpy runs pipelines.validate_phantom as the program).
"""
from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("pipelines.validate_phantom", run_name="__main__", alter_sys=True)
