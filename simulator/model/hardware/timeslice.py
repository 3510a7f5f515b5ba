"""Time slicing: what a message waits when its receiver is not on a core.

Processor sharing (``Host``) is the fluid view of many processes on few cores.
The kernel really runs each busy process for a *quantum* ``q`` (here the
scheduler tick: 4 ms at HZ=250, measured by ``calibrate``) and then the next
one on that core. A message is only taken in when its receiver runs: if
``m`` busy processes share a core round-robin, the receiver is off the core
with probability ``(m - 1) / m``, for the rest of an off-stretch of
``(m - 1) q``, so on average a hand-off waits::

    h(m) = (m - 1) / m * (m - 1) q / 2 = (m - 1)^2 q / (2 m)

The kernel keeps one run queue per core, so ``n`` processes on ``C`` cores
sit ``ceil(n / C)`` or ``floor(n / C)`` to a core; ``handoff_s`` averages
``h`` over the processes. With ``n <= C`` nobody waits: ``h = 0``.

The closed form lives with the others in ``simulator.model.comm.closed_forms`` (so that
``calibrate.poll_probe`` can print it beside what it measures).

Imports: simulator.model.comm.closed_forms.
"""
from __future__ import annotations

from simulator.model.comm.closed_forms import handoff_s  # noqa: F401  (the model's form)
