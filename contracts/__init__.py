"""The contracts between the stages: the files each stage writes and the next one reads.

* ``record``: the run record (``real`` writes it; ``calibrate`` and ``compare`` read it);
* ``profile``: a machine's measured costs (``calibrate`` writes it; the model reads it),
  and ``quality``, the bar its fits must pass;
* ``workload``, ``cluster``: what to predict and on which hardware;
* ``schedule``, ``curve``: a predicted update schedule and a measured accuracy curve;
* ``units``, ``checks``, ``tables``, ``files``, ``tomlw``: how numbers and units are read,
  bad values reported, CSV tables checked whole, files written atomically (JSON and TOML).

``real``, ``calibrate`` and ``simulator`` import from here and sit side by side over it;
``pipelines`` sits above all three. The equations that give a profile's alpha/beta their
meaning are the model's (``simulator.model.comm.closed_forms``); beside this package on the
ground floor, the command-line conventions are ``cli``'s, what the communication libraries
decide ``libraries``', and how a result is stated (mean and CI, accuracy curves) ``report``'s.

Imports: the standard library only (``record`` and ``tables`` pandas, ``files`` matplotlib
when a figure is saved); never a stage.
"""
