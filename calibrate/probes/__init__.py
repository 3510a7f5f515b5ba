"""What calibration measures: micro-benchmarks of this host and the workload of a model.

``probe`` runs one part (``compute_probe``: a step, core sharing, the server's update;
``comm_probe``: collectives under ``mpirun -n P``; ``sched_probe``: the scheduler's time
slice), each writing raw rows (``rawio``) by a plan (``plan``; ``estimate`` says what it
will cost); ``poll_probe`` measures busy-waiting ranks on shared cores, ``link`` the link of
the emulated cluster, ``workload`` a model's layers. The commands keep their paths at the
top of ``calibrate`` (``python -m calibrate.probe``, ``calibrate.link`` ...).

Imports: nothing itself.
"""
