"""The measure stage: run the training schemes for real and write run records.

``real.train`` runs one scheme (single process, under mpirun or torchrun),
``real.sweep`` many worker counts and repeats; ``real.schemes`` holds each
scheme's loop, ``real.cluster`` the emulated cluster of network namespaces.

Imports: nothing itself. Its modules may import torch, mpi4py and ``contracts``
(the run-record schema, CLI conventions), never the simulator's model, engine or commands,
nor ``calibrate``.
"""
