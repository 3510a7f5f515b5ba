"""Synchronous parameter server (seed 003, algorithm 1); see ``ps.py``."""
from .ps import train_sync as train  # noqa: F401
