"""Asynchronous parameter server with stale gradients (seed 003, seed 004); see ``ps.py``.

Imports: real.schemes.ps.
"""
from .ps import prepare_async as prepare, train_async as train  # noqa: F401
