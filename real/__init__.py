"""The measure stage: run the training schemes for real and write run records.

The commands stay at the top (``real.train``: one scheme, single process or under
mpirun, torchrun, srun; ``real.sweep``: many worker counts and repeats; ``real.replay``;
``real.phantom_check``), each a few lines over its module. The folders: ``launch/`` (how
a run starts and is watched), ``schemes/`` (each scheme's loop and properties),
``training/`` (data, models, the step, replays), ``records/`` (what a run record holds
and what is read back from records), ``cluster/`` (the emulated cluster of network
namespaces), ``phantom/`` (compute slept).

Imports: nothing itself. Its modules may import torch, mpi4py and ``contracts``
(the run-record schema, CLI conventions), never the simulator's model, engine or commands,
nor ``calibrate``.
"""
