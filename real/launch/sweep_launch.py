"""How ``real.sweep`` starts a point's ranks beyond this machine, and what it checks first.

* ``--hostfile FILE``: ``mpirun -f FILE -n R`` (MPICH hydra reaches the hosts by ssh;
  with ``--cluster``, through the emulated cluster's namespace launcher). Every
  host named in the file must resolve (on the emulated cluster: be one of its
  addresses) before anything starts.
* ``--launcher srun``: ``srun -n R`` inside a Slurm allocation (``sbatch`` or
  ``salloc``); the MPI schemes with ``--mpi=pmi2`` (MPICH reads its PMI from srun),
  the torch.distributed schemes meet at the first node (``real.launch.launchers``).
* Inside a Slurm allocation, whichever launcher: a point that needs more ranks
  than the allocation has tasks is refused before the sweep starts.

Threads per rank (``threads_for``): ``--threads T`` for every point; by default
(``--threads same``) every point's ranks run the same threads, cores // the most
ranks any point of the sweep puts on this host, so that a speedup compares ranks
and not thread counts (the P = 1 baseline included); ``--threads per-point`` gives
each point cores // its own ranks (every core busy at every P; its speedups then
mix threads with ranks, and the sweep says so). Ranks on other hosts
(``--hostfile``, ``srun``) take ``real.train``'s default there unless ``--threads T``.

Imports: real (dist, launchers, schemes).
"""
from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from real import schemes

from real.launch.dist import threads_per_rank
from real.launch.launchers import allocation_tasks


@dataclass(frozen=True)
class HostfileEntry:
    host: str
    slots: int
    line: int


def read_hostfile(path: str | Path, cluster=None) -> list[HostfileEntry]:
    """The hosts of an MPICH hostfile (``host[:slots]`` per line, ``#`` comments);
    ValueError naming the line of an unknown host."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ValueError(f"--hostfile {path}: {e.strerror or e}") from None
    entries = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        host, _, slots = text.partition(":")
        host = host.strip()
        if not slots.strip().isdigit() and slots.strip():
            raise ValueError(f"--hostfile {path} line {number}: {text!r} is not host[:slots]")
        entries.append(HostfileEntry(host, int(slots or 1), number))
        problem = _unknown_host(host, cluster)
        if problem:
            raise ValueError(f"--hostfile {path} line {number}: {problem}")
    if not entries:
        raise ValueError(f"--hostfile {path} names no host")
    return entries


def _unknown_host(host: str, cluster) -> str | None:
    if cluster is not None:
        if host in cluster.addresses:
            return None
        return (f"{host!r} is not a host of the emulated cluster '{cluster.prefix}' "
                f"(its hosts: {', '.join(cluster.addresses)})")
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return f"unknown host {host!r} (it does not resolve; fix the name or /etc/hosts)"
    return None


def srun() -> str:
    found = shutil.which("srun")
    if not found:
        raise FileNotFoundError("--launcher srun: srun not found (run the sweep inside a Slurm "
                                "allocation: sbatch or salloc)")
    return found


def srun_command(alg: str, ranks: int, argv: list[str]) -> list[str]:
    mpi = ["--mpi=pmi2"] if schemes.SCHEMES[alg].talks != "torch" else []
    return [srun(), *mpi, "-n", str(ranks), *argv]


def allocation_problem(points, environ=os.environ) -> str | None:
    """Inside a Slurm allocation: the first point that needs more ranks than it has tasks."""
    if "SLURM_JOB_ID" not in environ:
        return None
    tasks = allocation_tasks(environ)
    if tasks is None:
        return None
    for alg, p, _ in points:
        ranks = schemes.SCHEMES[alg].ranks(p)
        if schemes.SCHEMES[alg].rank_based and ranks > tasks:
            return (f"the Slurm allocation has {tasks} task(s) but {alg} at P = {p} needs "
                    f"{ranks} ranks: ask for sbatch -n {ranks} (or more), or sweep fewer workers")
    return None


def ranks_on_this_host(alg: str, p: int, ranks_per_host: int | None) -> int:
    """Processes of a point that share this machine's cores (all of them, unless spread)."""
    scheme = schemes.SCHEMES[alg]
    if not scheme.rank_based:
        return p if scheme.own_processes else 1
    return ranks_per_host or scheme.ranks(p)


def threads_for(args, alg: str, p: int, sweep_points, cores: int | None = None) -> int | None:
    """Threads per rank for one point: None leaves real.train's default (cores // ranks on
    the ranks' own host)."""
    if isinstance(args.threads, int):
        return args.threads
    if args.hostfile or args.launcher == "srun":
        return None
    cores = cores or os.cpu_count() or 1
    spread = args.ranks_per_host if args.cluster else None
    if args.threads == "per-point":
        return threads_per_rank(cores, ranks_on_this_host(alg, p, spread))
    most = max(ranks_on_this_host(a, q, spread) for a, q, _ in sweep_points)
    return threads_per_rank(cores, most)


def thread_note(args, sweep_points, cores: int | None = None) -> str | None:
    """A note when the sweep's points run different threads per rank (their speedups then
    mix threads with ranks)."""
    seen = {}
    for alg, p, _ in sweep_points:
        t = threads_for(args, alg, p, sweep_points, cores)
        if t is not None:
            seen.setdefault(p, t)
    if len(set(seen.values())) < 2:
        return None
    where = ", ".join(f"P={p}: {t}" for p, t in sorted(seen.items()))
    return (f"threads per rank differ across the sweep ({where}, --threads per-point): a "
            "speedup then compares thread counts as well as ranks")


def threads_flag(text: str) -> int | str:
    """``--threads``: a number of threads, ``same`` or ``per-point``."""
    import argparse
    if text in ("same", "per-point"):
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is neither a number of threads (1 or more), "
                                     "same nor per-point")
