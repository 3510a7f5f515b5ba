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

Imports: the standard library only.
"""
from __future__ import annotations


def handoff_s(runnable: int, cores: int, quantum_s: float) -> float:
    """Mean wait of a message for its receiver's turn on a core (seconds)."""
    if quantum_s <= 0 or runnable <= cores or cores < 1:
        return 0.0
    low, extra = divmod(runnable, cores)          # `extra` cores hold low + 1 processes
    total = 0.0
    for m, n_cores in ((low + 1, extra), (low, cores - extra)):
        if m > 1:
            total += n_cores * m * (m - 1) ** 2 * quantum_s / (2 * m)
    return total / runnable
