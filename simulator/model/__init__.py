"""What is simulated, in four parts the engines put together.

* the *workload* (``workload``): what a step costs and which tensors it sends when;
* the *hardware* (``hardware``: hosts and their cores; ``network``, ``fluid``:
  links shared max-min fairly; ``worker``, ``server``: the processes on them);
* the *communication* (``comm``): transports and collectives at two fidelities;
* the *schemes* (``schemes``): each rank's loop.

``config`` holds the scheme's knobs and the workers' speeds, ``recorder`` what
happened. Imports: ``contracts``, numpy and SimPy; never the engines,
the tools, torch or mpi4py.
"""
