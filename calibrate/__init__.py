"""Calibration: measure what a step, a message and a server update cost on this host.

Three stages, each a ``python -m`` command that reads only the files of the one before:

``calibrate.probe``
    micro-benchmarks. The compute part (one forward + backward + SGD update per
    model, batch size and thread count; k single-thread processes sharing the
    cores; the parameter server's update) runs alone; the communication part
    (MPI and gloo collectives against message size) runs under ``mpirun -n P``.
    Warm-up repetitions are excluded; every repetition is kept in a tidy CSV.
``calibrate.fit``
    straight lines through the probes (and through ``real.train`` run records):
    ``t_step = a + b * batch`` per thread count, Hockney ``t = alpha + beta * n``
    per collective with size segments, the per-byte reduction cost ``gamma``,
    the processor-sharing slowdown; written as one versioned profile
    (``contracts.profile``) with provenance and uncertainties.
``calibrate`` (``python -m calibrate``)
    the one documented command: probes and fit together, within a time budget.

Layout: ``probes/`` measures (the probe parts, the link, a model's workload, the plan and
its estimate, the raw files), ``fits/`` turns measurements into the profile (the fits,
their quality, tables and plots). Each command keeps its path at the top (``probe``,
``fit``, ``link``, ``workload``, ``estimate``, ``sched_probe``, ``poll_probe``: a few
lines that call the module's ``main``).

Imports: nothing itself. Its modules take ``contracts`` and ``cli``, from the simulator only the
closed forms of the collectives (``fits.fit_comm``, ``probes.poll_probe``), and from ``real``
what a probe needs to train or launch ranks (``real.training.models``, ``real.launch.dist``,
``real.cluster``); tests/test_layout.py names each crossing.
"""
