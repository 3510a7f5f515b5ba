"""What a rank trains: data sets, models, batches, one SGD step, and replays.

``data`` loads the data sets (``download``: checksummed mirrors), ``models`` builds the
networks and their flat views, ``batches`` says which samples a worker's batch holds,
``step`` is the single-process step and evaluation the schemes share. ``replay`` trains
one process along a simulated update schedule (``replay_state``: weights, optimizer
state, curve points); its command keeps its path: ``python -m real.replay``.

Imports: nothing itself.
"""
