"""How a run starts and is watched: one rank of ``real.train``, or a sweep of many runs.

``train`` parses a run's flags and hands them to ``runner`` (launch, data, model, scheme,
record); ``launchers`` reads what mpirun, torchrun or srun told the process, ``dist``
builds the communicators, ``devices`` picks CPU or GPU and the backend, ``context`` is
what a scheme runs with, ``supervise`` records a rank that dies, hangs or is stopped.
``sweep`` runs schemes over worker counts and repeats (``sweep_launch``: hostfiles,
srun, the emulated cluster). The commands keep their paths: ``python -m real.train``,
``python -m real.sweep``.

Imports: nothing itself.
"""
