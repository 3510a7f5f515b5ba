"""Hosts and their cores: who computes how fast when processes share them.

* ``host``: C cores shared as a fluid (processor sharing, threads, polling);
* ``cores``: one run queue per core with the scheduler's balance delay;
* ``timeslice``: what a message waits for its receiver's turn on a core.

Imports: SimPy only.
"""
