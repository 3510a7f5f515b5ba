"""Pipelines: the commands that run the whole loop, above the three stages.

A pipeline runs ``real`` (measure), ``calibrate`` (fit a profile) and ``simulator``
(predict, compare) one after the other and reports predicted against measured on what the
calibration did not see. It may import all three stages; none of them imports it, and the
simulator starts none of their commands (``tests/test_layout.py``).

* ``validate``: the hold-out validation on one host (sweep, calibrate on small P, compare);
* ``validate_accuracy``: time to accuracy, measured and replayed along predicted schedules;
* ``validate_cluster``: the communication-bound experiment on the emulated cluster (real
  compute, one rank per host, several link rates);
* ``validate_phantom``: the same on phantom runs (compute slept), up to 32 hosts;
  ``held_in``: what its comparison calibrates from the runs it holds in (the loop's Python
  a step, gloo's allreduce latency a ring step);
* ``predict`` (``--target-accuracy``) and ``replay``: time to accuracy, the real model
  trained along each predicted schedule (``accuracy``: simulate, ``real.replay``, the curve).

The old module paths (``python -m simulator.validate``, ``simulator.replay``, ...) run these,
for a release; ``simulator.predict --target-accuracy`` hands over to ``pipelines.predict``.

Imports: nothing at load; its modules import real's, calibrate's and the simulator's.
"""
