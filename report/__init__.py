"""How a result is stated, the same way in every stage that states it.

* ``stats``: a repeated measurement as its mean and 95% confidence interval;
* ``accuracy``: figures of test accuracy against training time (measured runs, predictions,
  or both on one figure), time to a target and final accuracy against P.

``real`` draws its runs' curves and summarises their repeats here, and the simulator its
predicted curves beside measured ones, so a measured and a predicted figure read alike.

Imports: numpy, scipy, matplotlib (when a figure is drawn), ``contracts.files``; never a stage.
"""
