"""What a run record holds beyond the schema, and what is read back from records.

Written during a run: ``timing`` (compute, communication, waiting per iteration),
``curve`` (accuracy over time), ``environment`` (where it ran), ``identity`` (the
settings that change its result), ``load`` and ``testbed`` (did the run get the machine
and stay faithful), ``wire`` and ``tcpstats`` (bytes sent, TCP's retransmissions),
``failures`` (how a run that did not finish is recorded). Read back: ``results`` (the
tidy table and speedups), ``accuracy_report`` (time to accuracy), ``plots``.

Imports: nothing itself.
"""
