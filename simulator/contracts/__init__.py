"""The contracts between the stages: what each stage writes and the next one reads.

* ``record``: the run record (``real`` writes it; ``calibrate`` and ``compare`` read it);
* ``profile``: a machine's measured costs (``calibrate`` writes it; the model reads it),
  with ``closed_forms``, the collective equations that give its alpha/beta their meaning;
* ``workload``, ``cluster``: what to predict and on which hardware;
* ``units``, ``checks``, ``cli``, ``tables``, ``files``, ``stats``: how every command
  reads numbers, flags and CSV tables (checked whole), reports bad input, writes files
  atomically and summarises repeats.

Every stage imports from here.

Imports: the standard library only (``record`` pandas, ``stats`` numpy and scipy,
``tables`` pandas, ``files`` matplotlib when a figure is saved); never another part of
the simulator.
"""
