"""How this process was launched, and the communicators every scheme uses.

One script runs four ways (as nanoGPT's ``train.py`` does):

* plain ``python -m real.train``: one process (``single``);
* ``mpirun -n P python -m real.train``: MPICH's hydra sets ``PMI_RANK`` / ``PMI_SIZE``
  (Open MPI sets ``OMPI_COMM_WORLD_*``); mpi4py gives rank and size;
* ``torchrun --nproc-per-node P -m real.train``: ``RANK`` / ``WORLD_SIZE`` are set;
* ``srun -n P python -m real.train``: ``SLURM_PROCID`` / ``SLURM_NTASKS``.

What each launcher sets, and how it is read, is in ``real.launch.launchers``.

Under MPI, torch.distributed (gloo) is set up from MPI: rank 0 opens the
store's listening socket and broadcasts ``addr:port``; nobody has to export
MASTER_ADDR by hand.

What listens, and where: when every rank runs on this host (a local run),
``listen_locally`` binds every listener to the loopback interface before MPI
starts (UCX's and libfabric's sockets, gloo's pairs), and the store's socket
is bound to 127.0.0.1 (``open_store``); nothing of a local run can be reached
from another machine. A run across hosts binds the store to ``MASTER_ADDR``
and gloo to ``GLOO_SOCKET_IFNAME``, the interface the user or the launcher
names (``real.cluster`` sets both). ``docs/security.md`` lists what is exposed.
``Comm`` hides which of the two carries the few whole-model calls (average,
gather, broadcast of Python objects) so a scheme's distributed part stays short.

Imports: mpi4py, numpy, torch, real.launch.launchers.
"""
from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import time
from datetime import timedelta

import numpy as np

from real.launch.launchers import Launch, env_launch, mpi_launch, under_mpi


def detect_launch() -> Launch:
    """How this process was started (``real.launch.launchers``): MPI, torchrun, srun or alone."""
    return mpi_launch() if under_mpi() else env_launch()


def threads_per_rank(cores: int, ranks_on_host: int) -> int:
    """floor(cores / ranks on this host), at least 1: no oversubscribed BLAS threads."""
    return max(1, cores // max(1, ranks_on_host))


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


LOOPBACK = "127.0.0.1"


def all_ranks_here(environ=os.environ) -> bool:
    """Whether every rank of this launch runs on this host, read from the launcher's
    variables before MPI starts (hydra, Open MPI, torchrun); a single process is local."""
    for local, world in (("MPI_LOCALNRANKS", "PMI_SIZE"),
                         ("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE"),
                         ("LOCAL_WORLD_SIZE", "WORLD_SIZE")):
        if environ.get(local, "").isdigit() and environ.get(world, "").isdigit():
            return int(environ[local]) == int(environ[world])
    return not any(v in environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "RANK"))


def loopback_interface() -> str:
    """The name of the interface holding 127.0.0.1 (``lo`` on Linux)."""
    try:
        import psutil
        for name, addrs in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == LOOPBACK for a in addrs):
                return name
    except (ImportError, OSError):
        pass
    return "lo"


def listen_locally(environ=os.environ) -> dict[str, str]:
    """On a local run, bind MPICH's (UCX, libfabric) and gloo's sockets to the loopback
    interface; a setting the user or the launcher made wins. Call before MPI_Init.
    Returns what was set."""
    if not all_ranks_here(environ):
        return {}
    lo = loopback_interface()
    wanted = {"UCX_NET_DEVICES": lo, "FI_TCP_IFACE": lo, "FI_SOCKETS_IFACE": lo,
              "GLOO_SOCKET_IFNAME": lo}
    added = {k: v for k, v in wanted.items() if k not in environ}
    environ.update(added)
    return added


ISOLATE_ENV = "PSGD_ISOLATE"        # "0": local launches keep the machine's network
_UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "sh", "-c",
            'ip link set lo up && exec "$@"', "sh"]


@functools.lru_cache(maxsize=1)
def can_isolate() -> bool:
    """Whether this machine lets a process tree have a network namespace of its own
    (``unshare`` and ``ip`` installed, user namespaces allowed); checked once."""
    if os.environ.get(ISOLATE_ENV) == "0" or not (shutil.which("unshare") and shutil.which("ip")):
        return False
    try:
        done = subprocess.run(_UNSHARE + ["true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def isolated(argv: list[str]) -> list[str]:
    """``argv`` (a local ``mpirun``) in a network namespace whose only interface is loopback.

    hydra binds its control port to every interface and has no setting for it; in such a
    namespace every interface is loopback, so nothing the job opens is reachable from
    another machine. The job still shares files, shared memory and CPUs with the machine.
    Where namespaces are not available (or ``PSGD_ISOLATE=0``), ``argv`` as it is."""
    return _UNSHARE + argv if can_isolate() else argv


def open_store(addr: str, world_size: int, timeout: timedelta, rank: int):
    """Rank 0: the torch.distributed store, listening on ``addr`` only (not on every
    interface, as TCPStore does when it opens the port itself). Returns (store, port)."""
    import torch.distributed as dist
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((addr, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    store = dist.TCPStore(addr, port, world_size, True, timeout, wait_for_workers=False,
                          master_listen_fd=sock.detach())
    return store, port


class Comm:
    """Whole-model communication for the schemes that are not about the collective itself."""
    rank: int
    size: int
    backend: str

    def allreduce_sum_(self, buf: np.ndarray) -> None: ...
    def allgather_obj(self, obj): ...
    def gather_obj(self, obj, root: int = 0): ...
    def bcast_obj(self, obj, root: int = 0): ...
    def barrier(self) -> None: ...


class SingleComm(Comm):
    rank, size, backend = 0, 1, "none"

    def allreduce_sum_(self, buf):
        pass

    def allgather_obj(self, obj):
        return [obj]

    def gather_obj(self, obj, root=0):
        return [obj]

    def bcast_obj(self, obj, root=0):
        return obj

    def barrier(self):
        pass


class PeerTimeout(RuntimeError):
    """A peer did not answer within the run's --timeout: it died, hung or is far too slow."""


WAIT_SLEEP_ENV = "PSGD_WAIT_SLEEP_S"   # the longest sleep between polls (0 or unset: spin)
FIRST_SLEEP_S = 50e-6
# Waiting ranks that leave their cores (docs/cluster.md, "Waiting ranks"): measured with
# ``benchmarks/mpi_wait.py`` between two hosts of the emulated cluster, a rank waiting
# 20 ms for 8 bytes took 99.8% of a core spinning in ``Test`` and 100% in MPI_Wait;
# ``Test`` with sleeps doubling from 50 us up to 1 ms took 2.7% and saw the message
# 0.48 ms later (median); MPICH's MPIR_CVAR_ENABLE_HEAVY_YIELD turns MPI_Wait's
# sched_yield into a 1 ns nanosleep: 23% of a core, 0.09 ms later.
SLEEPING_WAITS = {WAIT_SLEEP_ENV: "0.001", "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}


def sleeping_waits(environ=os.environ) -> dict[str, str]:
    """Make a rank's waits sleep: ``wait``'s polls back off to 1 ms, MPICH's blocking waits
    nanosleep instead of yielding. A setting the user made wins. Call before MPI_Init
    (MPICH reads its variables there); returns what was set. The runner does this for
    phantom runs on the emulated cluster, whose ranks share the machine's cores."""
    added = {k: v for k, v in SLEEPING_WAITS.items() if k not in environ}
    environ.update(added)
    return added


def wait(request, timeout_s: float, what: str, status=None,
         poll_s: float | None = None) -> None:
    """Complete an MPI request, or raise ``PeerTimeout`` after ``timeout_s`` seconds.

    A blocking MPI call never returns when its peer is gone; polling ``Test``
    keeps the deadline in Python's hands. It spins on the core (MPICH's ``Test`` never
    yields), unless ``poll_s`` (default: ``PSGD_WAIT_SLEEP_S`` from the environment) is
    above 0: then the rank sleeps between polls, 50 us at first and twice as long after
    each empty poll up to ``poll_s``, so it leaves its core while it waits and sees a
    message at most about ``poll_s`` (and at most about the time it has waited so far)
    after it arrived (``benchmarks/mpi_wait.py``, docs/cluster.md "Waiting ranks").
    """
    if poll_s is None:
        poll_s = float(os.environ.get(WAIT_SLEEP_ENV) or 0.0)
    deadline = time.monotonic() + timeout_s
    nap = FIRST_SLEEP_S
    while not (request.Test(status) if status is not None else request.Test()):
        if time.monotonic() > deadline:
            raise PeerTimeout(f"no answer within {timeout_s:g} s in {what} "
                              "(a peer rank died or hung)")
        if poll_s > 0:
            time.sleep(min(nap, poll_s))
            nap *= 2


class MpiComm(Comm):
    backend = "mpi"

    def __init__(self, timeout_s: float = 3600.0):
        from mpi4py import MPI
        self.MPI = MPI
        self.world = MPI.COMM_WORLD
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()
        self.timeout_s = timeout_s

    def allreduce_sum_(self, buf):
        # Non-blocking + deadline, so a dead peer ends the run after --timeout.
        wait(self.world.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM),
             self.timeout_s, "MPI allreduce")

    def allgather_obj(self, obj):
        return self.world.allgather(obj)

    def gather_obj(self, obj, root=0):
        return self.world.gather(obj, root=root)

    def bcast_obj(self, obj, root=0):
        return self.world.bcast(obj, root=root)

    def barrier(self):
        self.world.Barrier()


class TorchComm(Comm):
    """torch.distributed for runs launched by torchrun or srun.

    With NCCL the process group holds GPU tensors only; the whole-model calls here
    (numpy buffers, Python objects) then go through a gloo group beside it.
    """

    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.backend = str(dist.get_backend())
        self.group = dist.new_group(backend="gloo") if self.backend != "gloo" else None

    def allreduce_sum_(self, buf):
        import torch
        t = torch.from_numpy(buf)
        self.dist.all_reduce(t, group=self.group)

    def allgather_obj(self, obj):
        out = [None] * self.size
        self.dist.all_gather_object(out, obj, group=self.group)
        return out

    def gather_obj(self, obj, root=0):
        out = [None] * self.size if self.rank == root else None
        self.dist.gather_object(obj, out, dst=root, group=self.group)
        return out

    def bcast_obj(self, obj, root=0):
        box = [obj]
        self.dist.broadcast_object_list(box, src=root, group=self.group)
        return box[0]

    def barrier(self):
        self.dist.barrier(group=self.group)


def make_comm(launch: Launch, timeout_s: float = 3600.0) -> Comm:
    if launch.kind == "mpi":
        return MpiComm(timeout_s)
    if launch.kind == "env":
        return TorchComm()
    return SingleComm()


def init_torch_distributed(launch: Launch, timeout_s: float, backend: str = "gloo") -> None:
    """Join a torch.distributed group of ``backend`` (gloo, or nccl on GPUs).

    torchrun: ``env://`` (its agent's store); srun: ``tcp://`` at the first node
    (``real.launch.launchers``); MPI: rank 0 picks a free port and broadcasts its address
    (``MASTER_ADDR`` if set, else ``mpi_rendezvous_address``).
    ``timeout_s`` bounds every collective, so a dead peer ends the run instead of hanging it.
    """
    import torch.distributed as dist
    if dist.is_initialized():
        return
    timeout = timedelta(seconds=timeout_s)
    if launch.kind == "env" and launch.launcher != "srun":
        dist.init_process_group(backend, timeout=timeout)
        return
    if launch.kind == "env":            # srun: the first node's address, a port from the job id
        store = dist.TCPStore(launch.master_addr, launch.master_port, launch.world_size,
                              launch.rank == 0, timeout)
    else:
        store, port, addr = None, None, LOOPBACK
        local = launch.local_size == launch.world_size   # the same answer on every rank
        if launch.kind == "mpi" and not local:
            from mpi4py import MPI
            addr = os.environ.get("MASTER_ADDR") or mpi_rendezvous_address(MPI.COMM_WORLD)
        if launch.rank == 0:
            store, port = open_store(addr, launch.world_size, timeout, 0)
        if launch.kind == "mpi":
            from mpi4py import MPI
            addr, port = MPI.COMM_WORLD.bcast((addr, port), root=0)
        if store is None:
            store = dist.TCPStore(addr, port, launch.world_size, False, timeout)
    dist.init_process_group(backend, store=store, rank=launch.rank,
                            world_size=launch.world_size, timeout=timeout)


def mpi_rendezvous_address(world) -> str:
    """Where rank 0 can be reached by every rank: 127.0.0.1 when all share its host, else
    its address on the route to a rank on another host (collective: every rank calls it)."""
    from real.launch.launchers import address_toward, host_name, ipv4_addresses
    seen = world.allgather((host_name(), ipv4_addresses()))
    if all(h == seen[0][0] for h, _ in seen):
        return "127.0.0.1"
    if world.Get_rank() != 0:
        return ""                       # rank 0's answer is broadcast by the caller
    peers = [a for h, addrs in seen if h != seen[0][0] for a in addrs]
    return address_toward(peers) or socket.gethostbyname(socket.gethostname())


def finalize_mpi() -> None:
    """MPI_Finalize, where MPI was started, and the process manager told that this rank
    is done: before ``os._exit``, which skips C's exit handlers."""
    import sys
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
        if "MPICH" in mpi.Get_library_version():
            finalize_pmi()


PMI_ACK_WAIT_S = 5.0


def finalize_pmi(environ=os.environ) -> bool:
    """Say PMI-1's ``finalize`` on hydra's ``PMI_FD`` and wait for the ack.

    MPICH sends it from an exit handler (``atexit``), not from MPI_Finalize; a rank that
    leaves by ``os._exit`` never sends it, and hydra reads the closed PMI socket as an
    abnormal end and SIGKILLs every rank still running (``mpirun`` then exits 9, or 0
    with a rank cut short). Returns whether hydra acknowledged."""
    import select
    fd = environ.get("PMI_FD", "")
    if not fd.isdigit():
        return False                     # not under hydra's PMI-1 (Slurm, Open MPI, ...)
    fd = int(fd)
    try:
        os.write(fd, b"cmd=finalize\n")
        reply, deadline = b"", time.monotonic() + PMI_ACK_WAIT_S
        while b"\n" not in reply:
            wait_s = deadline - time.monotonic()
            if wait_s <= 0 or not select.select([fd], [], [], wait_s)[0]:
                return False
            chunk = os.read(fd, 256)
            if not chunk:
                return False
            reply += chunk
    except OSError:
        return False
    return reply.startswith(b"cmd=finalize_ack")


# --- MPICH's allreduce algorithm (seed 004) ------------------------------------

MPI_ALLREDUCE_ALGORITHMS = ("auto", "ring", "recursive_doubling", "reduce_scatter_allgather")


def select_mpi_allreduce(algorithm: str, environ=os.environ) -> dict[str, str]:
    """Put MPICH's control variables for ``algorithm`` into ``environ``; returns what was set.

    MPICH reads them once, in MPI_Init, which mpi4py calls on ``from mpi4py import
    MPI``: so this must run before ``detect_launch``.  Device-level collectives are
    switched off for a named algorithm, else ch4's own selection could bypass the
    CVAR.  Where the named algorithm cannot serve a call MPICH falls back to its
    automatic choice (``MPIR_CVAR_COLLECTIVE_FALLBACK`` stays at its default):
    MPI_Init itself all-reduces a few integers, too few for
    reduce_scatter_allgather; the gradient buffer (count >= P) is served by all three.
    """
    if algorithm not in MPI_ALLREDUCE_ALGORITHMS:
        raise ValueError(f"unknown MPI allreduce algorithm {algorithm!r}")
    cvars = {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": algorithm}
    if algorithm != "auto":
        cvars["MPIR_CVAR_DEVICE_COLLECTIVES"] = "none"
    environ.update(cvars)
    return cvars
