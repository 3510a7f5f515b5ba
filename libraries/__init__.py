"""What the libraries the schemes run on decide, read from their sources, for every stage.

* ``mpich``: which allreduce, reduce and broadcast MPICH runs for a message's size, the
  ranks and their hosts;
* ``gloo``: how gloo cuts its ring allreduce into segments and frames a message on TCP.

``real`` (to count what a run sends) and ``simulator`` (to price it) import from here, as
they import the file formats from ``contracts``; what an algorithm costs stays the model's.

Imports: the standard library only; never a stage.
"""
