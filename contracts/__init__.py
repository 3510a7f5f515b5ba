"""The contracts between the stages: the files each stage writes and the next one reads.

* ``record``: the run record (``real`` writes it; ``calibrate`` and ``compare`` read it);
* ``profile``: a machine's measured costs (``calibrate`` writes it; the model reads it),
  and ``quality``, the bar its fits must pass;
* ``workload``, ``cluster``: what to predict and on which hardware;
* ``schedule``, ``curve``: a predicted update schedule and a measured accuracy curve;
* ``units``, ``checks``, ``tables``, ``files``, ``tomlw``, ``stats``: how numbers and
  units are read, bad values reported, CSV tables checked whole, files written atomically
  (JSON and TOML) and repeats summarised.

``real``, ``calibrate`` and ``simulator`` import from here and sit side by side over it;
``pipelines`` sits above all three. The equations that give a profile's alpha/beta their
meaning are the model's (``simulator.model.comm.closed_forms``); the command-line
conventions are ``cli``'s.

Imports: the standard library only (``record`` pandas, ``stats`` numpy and scipy,
``tables`` pandas, ``files`` matplotlib when a figure is saved); never a stage.
"""
