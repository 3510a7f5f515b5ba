"""A small real cluster on one machine: hosts as network namespaces behind a shaped switch.

On one machine the schemes share memory and communication is almost free, so
a measured run says little about a cluster.  This module builds one to measure
on: each *host* is a Linux network namespace with one veth link to a bridge
(the *switch*, in a namespace of its own), and each link is limited with a tc
token bucket to ``bandwidth_bits_per_s`` in both directions.  Link latency is
what the kernel gives between namespaces (tens of microseconds): ``netem`` is
not available in this kernel, so no delay is added.  All hosts share the
machine's cores and memory; only the network is emulated.

Commands (root and iproute2 needed)::

    python -m real.cluster up --hosts 4 --bandwidth 100mbit
    python -m real.cluster status
    python -m real.cluster check          # TCP throughput host 0 -> host 1
    python -m real.cluster down

From Python, ``with emulated_cluster(2, "100mbit") as cluster:`` brings one up
and always tears it down.  ``real.cluster.launch`` turns a description into
commands (``netns_command``, ``mpirun_command``, ``torch_env``); the current
cluster's description is kept in ``/run/<prefix>-cluster.json`` for them.
The package: ``state`` (the description and its file), ``netns`` (namespaces,
veth links, tc shapers), ``lifecycle`` (up, down, ``emulated_cluster``),
``launch`` (commands that run inside the hosts), ``check`` (a TCP throughput
probe) and ``__main__`` (the command line).

Imports: its own modules; they use the standard library, ``ip`` and ``tc``, and (``check``,
``__main__``) ``cli``.
"""
from __future__ import annotations

from real.cluster.launch import (
    mpi_env,
    mpirun_command,
    netns_command,
    rank_env,
    torch_env,
    torchrun_c10d_command,
    torchrun_command,
)
from real.cluster.lifecycle import down, emulated_cluster, up
from real.cluster.netns import ClusterUnavailable
from real.cluster.state import (
                                DEFAULT_PREFIX,
                                DEFAULT_SUBNET,
                                Cluster,
                                default_burst_bytes,
                                parse_bandwidth,
                                parse_size,
                                read_state,
                                state_path,
)

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_SUBNET",
    "Cluster",
    "ClusterUnavailable",
    "default_burst_bytes",
    "down",
    "emulated_cluster",
    "mpi_env",
    "mpirun_command",
    "netns_command",
    "rank_env",
    "parse_bandwidth",
    "parse_size",
    "read_state",
    "state_path",
    "torch_env",
    "torchrun_c10d_command",
    "torchrun_command",
    "up",
]
