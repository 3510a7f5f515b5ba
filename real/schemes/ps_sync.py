"""Synchronous parameter server (seed 003, algorithm 1); see ``ps.py``.

Imports: real.schemes.ps.
"""
from .ps import prepare_sync as prepare, train_sync as train  # noqa: F401
