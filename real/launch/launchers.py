"""What each launcher tells a process: rank, world size, local rank, rendezvous address.

One ``real.train`` runs under every launcher a user has; this module reads what
each one puts into the environment, so the rest of ``real`` sees one ``Launch``:

==========================  =================================  ==========================
launcher                    sets                               ``Launch.kind``
==========================  =================================  ==========================
``mpirun`` (MPICH hydra)    ``PMI_RANK``, ``PMI_SIZE``,        ``mpi``: rank and size from
                            ``MPI_LOCALRANKID``                mpi4py (MPI_COMM_WORLD)
``mpirun`` (Open MPI)       ``OMPI_COMM_WORLD_*``              ``mpi``
``srun --mpi=pmi2``         ``PMI_RANK``, ``SLURM_*``          ``mpi``
``srun`` (no MPI)           ``SLURM_PROCID``, ``SLURM_NTASKS``, ``env``: torch.distributed
                            ``SLURM_LOCALID``, node list       at the first node
``torchrun``                ``RANK``, ``WORLD_SIZE``,          ``env``: torch.distributed
                            ``LOCAL_RANK``, ``MASTER_ADDR``    at MASTER_ADDR:MASTER_PORT
none                        nothing                            ``single``
==========================  =================================  ==========================

Under ``srun`` without MPI the rendezvous is ``MASTER_ADDR`` / ``MASTER_PORT`` when
the job script exports them, else the first host of ``SLURM_STEP_NODELIST`` and
port ``SLURM_PORT_BASE + SLURM_JOB_ID % SLURM_PORT_SPAN`` (every rank computes the
same one). A Slurm *batch script* also has ``SLURM_PROCID`` but no step
(``SLURM_STEP_ID``): a plain ``python -m real.train`` in it runs as one process.

``host_name`` names the host a process runs on: the host name, and on the
emulated cluster (where every namespace shares one host name) the network
namespace after a slash, ``vm/psgd-h1``. ``address_toward`` finds the address of
this host that a peer on another host can reach (for the torch.distributed
rendezvous of gloo schemes under ``mpirun -f hostfile``).

Imports: the standard library only (mpi4py in ``mpi_launch``, psutil in ``ipv4_addresses``).
"""
from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SLURM_PORT_BASE = 20000
SLURM_PORT_SPAN = 10000
NETNS_DIR = Path("/run/netns")
MPI_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


class LaunchError(ValueError):
    """The launcher's variables do not describe a run (a usage error, exit 2)."""


@dataclass(frozen=True)
class Launch:
    kind: str                 # single | mpi | env (torch.distributed rendezvous from the environment)
    rank: int
    world_size: int
    local_size: int           # ranks on this host
    launcher: str = "python"  # what started the ranks: python | mpirun | srun | torchrun | env
    local_rank: int = 0       # index among the ranks on this host (picks the GPU)
    master_addr: str | None = None   # torch.distributed rendezvous (kind env)
    master_port: int | None = None

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def launcher_name(environ: Mapping[str, str]) -> str:
    """Which program started this process, from the variables it leaves behind."""
    if "MPI_LOCALRANKID" in environ or "HYDI_CONTROL_FD" in environ:
        return "mpirun"               # MPICH hydra (mpirun = mpiexec.hydra)
    if "OMPI_COMM_WORLD_RANK" in environ:
        return "mpirun"               # Open MPI
    if "TORCHELASTIC_RUN_ID" in environ:
        return "torchrun"             # (also when torchrun itself runs under srun)
    if slurm_step(environ):
        return "srun"
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return "env"                  # RANK / WORLD_SIZE exported by hand (real.cluster.torch_env)
    return "python"


def under_mpi(environ: Mapping[str, str] = os.environ) -> bool:
    return any(v in environ for v in MPI_VARS)


def slurm_step(environ: Mapping[str, str]) -> bool:
    """Inside a task of ``srun`` (a job step), not merely inside an allocation."""
    return "SLURM_PROCID" in environ and ("SLURM_STEP_ID" in environ or "SLURM_STEPID" in environ)


def launched_world_size(environ: Mapping[str, str] = os.environ) -> int | None:
    """Ranks the launcher started, before any MPI or torch init (None: no launcher)."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"):
        if var in environ:
            return _int(environ, var)
    if slurm_step(environ):
        return _slurm_tasks(environ)
    return None


def env_launch(environ: Mapping[str, str] = os.environ) -> Launch:
    """The launch as torchrun, srun or nothing describes it (not MPI: see ``mpi_launch``)."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        size = _int(environ, "WORLD_SIZE")
        rank = _rank(environ, "RANK", size)
        port = _int(environ, "MASTER_PORT") if "MASTER_PORT" in environ else None
        return Launch("env", rank, size, _int(environ, "LOCAL_WORLD_SIZE", size),
                      launcher_name(environ), _int(environ, "LOCAL_RANK", 0),
                      environ.get("MASTER_ADDR"), port)
    if slurm_step(environ):
        return slurm_launch(environ)
    return Launch("single", 0, 1, 1)


def slurm_launch(environ: Mapping[str, str]) -> Launch:
    """Rank, world size, local rank and rendezvous of one ``srun`` task."""
    size = _slurm_tasks(environ)
    rank = _rank(environ, "SLURM_PROCID", size)
    nodes = expand_hostlist(environ.get("SLURM_STEP_NODELIST")
                            or environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
                            or "")
    if not nodes:
        raise LaunchError("srun: no node list (SLURM_STEP_NODELIST) to find the first node at")
    per_node = tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE")
                              or environ.get("SLURM_TASKS_PER_NODE") or "", len(nodes))
    node = _int(environ, "SLURM_NODEID", 0)
    if sum(per_node) != size or not 0 <= node < len(nodes):
        raise LaunchError(f"srun: {size} tasks do not match SLURM_STEP_TASKS_PER_NODE "
                          f"{per_node} on {len(nodes)} nodes (node {node})")
    if "MASTER_PORT" in environ:
        port = _int(environ, "MASTER_PORT")
    else:
        port = SLURM_PORT_BASE + _int(environ, "SLURM_JOB_ID", 0) % SLURM_PORT_SPAN
    return Launch("env", rank, size, per_node[node], "srun", _int(environ, "SLURM_LOCALID", 0),
                  environ.get("MASTER_ADDR") or nodes[0], port)


def mpi_launch(environ: Mapping[str, str] = os.environ) -> Launch:
    """Rank and size from MPI_COMM_WORLD; ranks on this host from a shared-memory split."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    local = world.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    return Launch("mpi", world.Get_rank(), world.Get_size(), local_size,
                  launcher_name(environ), local_rank)


def allocation_tasks(environ: Mapping[str, str] = os.environ) -> int | None:
    """Tasks of the Slurm allocation this process runs in (None: not in one)."""
    for var in ("SLURM_NTASKS", "SLURM_NPROCS"):
        if var in environ:
            return _int(environ, var)
    if "SLURM_TASKS_PER_NODE" in environ:
        return sum(tasks_per_node(environ["SLURM_TASKS_PER_NODE"], None))
    return None


# --- Slurm's compact notations -------------------------------------------------------

def expand_hostlist(text: str) -> list[str]:
    """``node[01-03,07],gpu5`` -> node01, node02, node03, node07, gpu5 (as ``scontrol
    show hostnames`` prints them; zero padding kept, several bracket groups allowed)."""
    names: list[str] = []
    for item in _split_top(text.strip()):
        names.extend(_expand_one(item))
    return names


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [s for s in (i.strip() for i in items) if s]


def _expand_one(item: str) -> list[str]:
    m = re.match(r"^([^\[]*)\[([^\]]+)\](.*)$", item)
    if not m:
        if "[" in item or "]" in item:
            raise LaunchError(f"cannot read the Slurm host list item {item!r}")
        return [item]
    head, ranges, tail = m.groups()
    out = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise LaunchError(f"cannot read the Slurm host list range {part!r} in {item!r}")
        width = len(lo)
        for n in range(int(lo), int(hi or lo) + 1):
            out.extend(f"{head}{n:0{width}d}{rest}" for rest in _expand_one(tail))
    return out


def tasks_per_node(text: str, n_nodes: int | None) -> list[int]:
    """``2(x3),1`` -> [2, 2, 2, 1]; an empty text means one task on each of ``n_nodes``."""
    if not text.strip():
        return [1] * (n_nodes or 0)
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise LaunchError(f"cannot read the Slurm tasks per node {text!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def _slurm_tasks(environ: Mapping[str, str]) -> int:
    for var in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"):
        if var in environ:
            return _int(environ, var)
    raise LaunchError("srun: SLURM_NTASKS is not set")


def _int(environ: Mapping[str, str], var: str, default: int | None = None) -> int:
    if var not in environ:
        if default is None:
            raise LaunchError(f"{var} is not set")
        return default
    try:
        return int(environ[var])
    except ValueError:
        raise LaunchError(f"{var}={environ[var]!r} is not a whole number") from None


def _rank(environ: Mapping[str, str], var: str, size: int) -> int:
    rank = _int(environ, var)
    if not 0 <= rank < size:
        raise LaunchError(f"{var}={rank} is outside 0..{size - 1}")
    return rank


# --- where a process runs ------------------------------------------------------------

def host_name() -> str:
    """This host's name; inside a named network namespace (the emulated cluster) also the
    namespace, since every namespace of one machine has the same host name."""
    ns = network_namespace()
    return f"{socket.gethostname()}/{ns}" if ns else socket.gethostname()


def network_namespace() -> str | None:
    """The name under /run/netns of this process's network namespace, or None."""
    try:
        mine = os.stat("/proc/self/ns/net").st_ino
        for entry in NETNS_DIR.iterdir():
            if os.stat(entry).st_ino == mine:
                return entry.name
    except OSError:
        pass
    return None


def ipv4_addresses() -> list[str]:
    """This host's IPv4 addresses other than loopback (what a peer could reach it at)."""
    try:
        import psutil
        return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                if a.family == socket.AF_INET and not a.address.startswith("127.")]
    except Exception:   # noqa: BLE001 - no psutil or no interfaces: no candidates
        return []


def address_toward(peer_addresses: list[str]) -> str | None:
    """The local address the kernel would send from to reach one of ``peer_addresses``
    (a UDP ``connect`` picks the route and sends nothing), or None."""
    for peer in peer_addresses:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((peer, 9))
                return s.getsockname()[0]
        except OSError:
            continue
    return None


def hosts_of(names_by_rank: list[str]) -> list[dict]:
    """[{"host": name, "ranks": [...]}] in order of each host's first rank."""
    hosts: dict[str, list[int]] = {}
    for rank, name in enumerate(names_by_rank):
        hosts.setdefault(name, []).append(rank)
    return [{"host": h, "ranks": r} for h, r in hosts.items()]
