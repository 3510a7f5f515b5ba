"""Training schemes by name. Each module has ``train(ctx) -> list[float]`` (epoch times, s).

``RANK_BASED`` schemes need one process per rank (mpirun / torchrun); the others
start their own processes or none.
"""
from __future__ import annotations

import importlib

SCHEMES = ("serial", "psgd")
RANK_BASED = ("psgd",)


def get(name: str):
    if name not in SCHEMES:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(SCHEMES)}")
    return importlib.import_module(f"{__name__}.{name}")
