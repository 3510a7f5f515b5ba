"""Asynchronous parameter server with stale gradients (seed 003, seed 004); see ``ps.py``.

Imports: real.schemes.ps.
"""
from .ps import train_async as train  # noqa: F401
