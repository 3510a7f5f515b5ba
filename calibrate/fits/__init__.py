"""From raw probes (and run records) to a profile: straight lines, their quality, their tables.

``fit`` writes the profile from ``fit_compute`` (step lines, core sharing, the server's
update), ``fit_comm`` (Hockney lines per collective) and ``runs`` (steps of run records),
all through ``linefit``; ``quality`` judges each fit against the bar; ``report`` and
``plots`` show them. The command keeps its path: ``python -m calibrate.fit``.

Imports: nothing itself.
"""
