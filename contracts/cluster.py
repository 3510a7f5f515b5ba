"""The cluster contract: hosts, their cores, the links between them, where ranks sit.

* ``Cluster``: hosts of ``cores_per_host`` cores; hosts talk over full-duplex
  links (``Link``) through a non-blocking switch; processes on one host talk
  through shared memory (the profile's transport of the scheme's backend).
  Ranks are placed ``round_robin`` (rank r on host r mod H) or ``packed``
  (fill a host with ``ranks_per_host`` ranks, by default its cores, before
  the next one). ``shared_cores`` describes an
  *emulated* cluster (``real.cluster``: hosts are network namespaces of one
  machine): every host keeps its own link, but all processes of all hosts
  draw compute from ONE pool of ``cores_per_host`` cores.
* ``LinkCalibration``: what ``python -m calibrate.link`` measured on one
  emulated link, to price links at other rates.

The cluster can be read from a small TOML file (``load_cluster``)::

    [cluster]
    hosts = 16                  # optional: without it hosts grow with P in a prediction
    cores_per_host = 8
    placement = "round_robin"   # or "packed"
    shared_cores = false        # true: all hosts share one pool of cores_per_host cores
    [link]
    bandwidth = "10gbit"
    latency = "20us"            # one-way, end to end, per message
    socket_buffer = "6MiB"      # optional: what crosses before a receive is posted (default 0)

Accelerator hosts and the network between hosts (``Hardware``, all optional)::

    [cluster]
    hosts = 128
    devices_per_host = 4        # accelerators (one rank each); instead of cores_per_host
    cpu_cores = 40              # optional: the host's CPU cores, for the input pipeline
    [device]
    name = "Tesla P100 PCIe"
    flops = "9.3TFLOP/s"        # sustained compute rate (scales a workload measured elsewhere)
    ddp_buffer = "18.4us"       # optional: what DDP's broadcast of one buffer adds to a step
    ddp_gradient = "6.64us"     # optional: what DDP's two copies of one gradient add to a step
                                # (simulator.model.hardware.ddp_calls; 0: not modelled)
    memory_bandwidth = "732GB/s"  # optional: the device memory's rate, and the host's time
    host_call = "7.74us"        # a Python call of a small kernel: the optimizer's step
                                # (simulator.model.hardware.optimizer_step; 0: not modelled)
    [intra]                     # between two devices of one host (NVLink, PCIe)
    bandwidth = "10GB/s"
    latency = "5.7us"
    [host_link]                 # optional: a device's copies to or from pinned host memory
    bandwidth = "11.7GB/s"      # (gloo on accelerator hosts, hierarchical allreduces)
    latency = "0us"             # optional: each copy's fixed cost (default 0)
    [link]                      # each NIC into the network
    bandwidth = "25gbit"        # line rate
    payload_efficiency = 0.93   # share of it that carries data (headers)
    latency = "6.6us"
    nics = 1                    # NICs per host; rank r uses NIC (r mod ranks per host) mod nics
    [topology]
    kind = "two_tier"           # or "switch" (non-blocking, the default)
    hosts_per_leaf = 16         # hosts under one leaf switch
    oversubscription = 2.0      # leaf downlinks : uplinks
    [nccl]
    call_latency = "8.4us"      # NCCL's base latency per collective call
    channels = 2                # rings (or trees) a collective is split over
    protocol = "auto"           # ring allreduce: "simple", "ll", the faster ("auto", NCCL 2.5's
                                # tuner), or a release's size rule ("nccl-2.2", "nccl-2.3")
    ll_threshold = "16KiB"      # "nccl-2.2": LL up to this many bytes a call (NCCL_LL_THRESHOLD)
    ll_thread_threshold = "32B" # "nccl-2.3": bytes per thread (32 Pascal and older, 64 Volta on)
    ll_call_latency = "3.6us"   # the low-latency (LL) protocol's base latency per call,
    ll_intra_latency = "1.0us"  # its latency per ring step inside a host,
    ll_link_latency = "0.9us"   # its latency per ring step between hosts,
    ll_bandwidth_share = 0.25   # and the share of the bandwidth it reaches (no ll_*: Simple only)
    ll_max_bandwidth = "87.7GB/s"   # optional: the most bus bandwidth LL reaches (llMaxBw)
    ll128_call_latency = "10us" # optional, as the ll_* keys: NCCL's LL128 protocol
    ll128_intra_latency = "1.9us"
    ll128_link_latency = "4us"
    ll128_bandwidth_share = 0.92
    ll128_max_bandwidth = "203GB/s"
    release = "2.8.3"           # optional: the NCCL release the costs are read from
    ring_plateau = 1.9          # optional: NCCL's "plateau effect of ring": a Simple ring
                                # allreduce across hosts takes this times its step latencies
    ring_plateau_bytes_per_rank = "4KiB"   # from this many bytes per rank on (with it)
    compute_slowdown = 0.189    # optional: compute runs 18.9% slower while a collective
                                # is in flight on its device (0: not modelled)
    compute_slowdown_fp32 = 0.081   # optional: the same for a step in fp32 (also _tf32,
                                    # _amp); a precision without its own key takes
                                    # compute_slowdown

Every value may be written as ``{ value = ..., source = "..." }``: presets
(``simulator/data/presets/*.toml``, ``load_preset``) give each number its
source, and ``Cluster.sources`` keeps them for the prediction's provenance.

Imports: ``contracts.checks`` and ``contracts.units`` only.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import tomllib

from contracts.checks import ConfigError, nonnegative, positive, whole
from contracts.units import parse_bandwidth, parse_bytes, parse_duration, parse_flop_rate

PLACEMENTS = ("round_robin", "packed")
MAX_HOSTS = 65536                 # as many hosts as the simulator takes workers
MAX_CORES_PER_HOST = 4096
# every key a cluster file may hold, by section: a key nobody reads is a typo, named
SECTION_KEYS = {
    "cluster": ("hosts", "cores_per_host", "devices_per_host", "placement", "shared_cores",
                "ranks_per_host", "cpu_cores"),
    "link": ("bandwidth", "latency", "payload_efficiency", "socket_buffer", "ack_share", "nics",
             "shaped_bandwidth", "cpu_per_message", "cpu_per_byte", "cpu_per_wakeup"),
    "intra": ("bandwidth", "latency", "payload_efficiency"),
    "host_link": ("bandwidth", "latency"),
    "device": ("name", "flops", "ddp_buffer", "ddp_gradient", "memory_bandwidth", "host_call"),
    "topology": ("kind", "hosts_per_leaf", "oversubscription"),
    "nccl": ("call_latency", "channels", "channel_bandwidth", "protocol", "ll_call_latency",
             "ll_intra_latency", "ll_link_latency", "ll_bandwidth_share", "ll_threshold",
             "ll_thread_threshold", "ll_max_bandwidth", "ll128_call_latency",
             "ll128_intra_latency", "ll128_link_latency", "ll128_bandwidth_share",
             "ll128_max_bandwidth", "release", "kernel_channels", "ring_plateau", "ring_plateau_bytes_per_rank",
             "compute_slowdown", "compute_slowdown_fp32",
             "compute_slowdown_tf32", "compute_slowdown_amp"),
    "fit": None,                  # calibrate.link's provenance: not read
}
TOP_KEYS = ("name", "source")
# TCP over Ethernet with delayed ACKs: one 66-byte ACK frame (14 Ethernet + 20 IP + 32 TCP
# with timestamps) for every two full 1514-byte frames of data
ACK_SHARE = 66 / (2 * 1514)
# A TCP segment's payload on a 1500-byte MTU (1500 - 20 IP - 20 TCP - 12 timestamps), and the
# largest packet TCP hands a device that segments for it (veth: GSO, 64 KiB: 45 segments)
SEGMENT_PAYLOAD_BYTES = 1448
GSO_PAYLOAD_BYTES = 45 * SEGMENT_PAYLOAD_BYTES


@dataclass(frozen=True)
class Link:
    """One full-duplex host link: t_msg(n) = latency_s + n / bandwidth_bytes_per_s.

    ``socket_buffer_bytes``: how much of a message crosses before its receive is
    posted. TCP moves the first bytes into the receiver's (and sender's) kernel
    buffers whatever the application does; only the rest waits for the receive
    (MPI's and gloo's rendezvous). 0: all of it waits (the receive is posted first).

    ``ack_share``: TCP acknowledges every second full segment with a frame of its
    own on the reverse direction (66 bytes with timestamps per 2 x 1514 on the
    wire: ``ACK_SHARE`` = 0.0218 of the link). Alone on a link it takes idle
    capacity; when both directions carry data it is taken from the data.

    ``cpu_s_per_message`` and ``cpu_s_per_byte``: the CPU a rank spends on one message it
    sends or receives over this link, ``c(n) = cpu_s_per_message + cpu_s_per_byte * n``
    (TCP through the kernel in segments of the link's MTU; measured by ``calibrate.link``
    from the process time of gloo's ping-pong). 0: not measured (a sleeping rank's calls
    then cost their transport's ``cpu_fraction`` of their local time).

    ``cpu_s_per_wakeup``: the CPU of one wake-up of the receiver's gloo device thread
    (``Loop::run``'s ``epoll_wait`` returns, ``Pair::handleEvents`` reads what arrived,
    ``gloo/transport/tcp/loop.cc``, ``pair.cc``). It wakes once for every packet the link
    delivers on its own, so a message's CPU depends on the link, not only on the rank:
    ``message_cpu_s``. 0: not measured (``cpu_s_per_byte`` is then all of it).

    ``cpu_shared_cores``: where the hosts are network namespaces of one machine (the
    emulated cluster), the cores that run every host's messages: that CPU lies on a gloo
    ring's path (``comm.gloo``) and ``P`` ranks share these cores for it. 0: each rank
    handles its messages on a core of its own.

    ``burst_bytes``: the depth of a token bucket that shapes each direction of the link
    (tc ``tbf``'s ``burst``, in payload bytes): after the direction idled for
    ``burst_bytes / bandwidth`` that many bytes cross at once, and only the rest at the
    rate (``model.network.TokenBuckets``). 0 (a NIC's line rate): none."""
    bandwidth_bytes_per_s: float
    latency_s: float
    socket_buffer_bytes: float = 0.0
    ack_share: float = 0.0              # reverse-direction capacity a payload byte's ACKs take
    cpu_s_per_message: float = 0.0
    cpu_s_per_byte: float = 0.0
    burst_bytes: float = 0.0
    cpu_shared_cores: int = 0
    cpu_s_per_wakeup: float = 0.0

    def __post_init__(self):
        positive("link bandwidth", self.bandwidth_bytes_per_s)
        nonnegative("link latency", self.latency_s)
        nonnegative("link socket_buffer_bytes", self.socket_buffer_bytes)
        nonnegative("link cpu_s_per_message", self.cpu_s_per_message)
        nonnegative("link cpu_s_per_byte", self.cpu_s_per_byte)
        nonnegative("link burst_bytes", self.burst_bytes)
        nonnegative("link cpu_s_per_wakeup", self.cpu_s_per_wakeup)
        whole("link cpu_shared_cores", self.cpu_shared_cores, 0)
        if not 0.0 <= self.ack_share < 1.0:
            raise ConfigError(f"link ack_share must be in [0, 1) (got {self.ack_share!r})")

    def message_cpu_s(self, n_bytes: float) -> float:
        """A rank's CPU for one message of ``n_bytes`` it sends or receives over this link,
        ``c(n) = cpu_s_per_message + cpu_s_per_byte * n + wakeup_cpu_s(n)``."""
        return self.cpu_s_per_message + self.cpu_s_per_byte * n_bytes + self.wakeup_cpu_s(n_bytes)

    def wakeup_cpu_s(self, n_bytes: float) -> float:
        """A message's share of the receiver's wake-ups beyond its first: the bytes past
        the link's bucket cross at the rate, ``delivered_bytes`` at a time, each waking the
        receiver's device thread; those within it arrive back to back and are read at once.
        Half of it a side (``c(n)`` prices the sender and the receiver alike, as
        ``calibrate.link`` halves a round trip)."""
        past = max(0.0, n_bytes - self.burst_bytes)
        return self.cpu_s_per_wakeup * past / (2 * delivered_bytes(self.burst_bytes))


def delivered_bytes(burst_bytes: float) -> float:
    """The payload a shaped link delivers at once, so the receiver's thread wakes per:
    tc ``tbf`` cuts a packet longer than its bucket into segments (Linux
    ``net/sched/sch_tbf.c``, ``tbf_enqueue`` -> ``tbf_segment``, the length counting every
    segment's headers: ``qdisc_pkt_len_init``), which then arrive one by one at the rate:
    a segment each below a 64 KiB bucket, a whole GSO packet at or above it, or with no
    bucket (``burst_bytes`` 0: a NIC's line rate)."""
    if 0 < burst_bytes < GSO_PAYLOAD_BYTES:
        return float(SEGMENT_PAYLOAD_BYTES)
    return float(GSO_PAYLOAD_BYTES)


TOPOLOGIES = ("switch", "two_tier")
PROTOCOLS = ("auto", "simple", "ll", "ll128", "nccl-2.2", "nccl-2.3")
LL_THRESHOLD_BYTES = 16384        # NCCL_LL_THRESHOLD's default up to NCCL 2.2 (its docs)
LL_MAX_THREADS = 256              # NCCL_LL_MAX_NTHREADS of NCCL 2.3-2.4 (src/include/core.h)


@dataclass(frozen=True)
class LowLatency:
    """One of NCCL's low-latency protocols for ring allreduce. LL: each 8-byte line
    carries 4 bytes of data and a flag; LL128: each 128-byte line 120 bytes and a flag
    (NVLink only). A step needs no separate synchronisation (a lower latency per step and
    per call) but moves data at a fraction of the bus bandwidth, at most
    ``max_bus_bytes_per_s`` of it (NCCL's ``llMaxBw``; LL128's per-channel cap times the
    channels; 0: no cap). NCCL's tuner prices a ring allreduce of n bytes over P ranks,
    for each protocol, as (``src/graph/tuning.cc``, ``ncclTopoTuneModel``)::

        call_latency + 2 (P - 1) step_latency
                     + n / (min(share * bus bandwidth, max_bus) * P / (2 (P - 1)))

    and runs the cheapest (``src/enqueue.cc``)."""
    call_latency_s: float
    intra_latency_s: float         # per ring step between two devices of a host
    link_latency_s: float          # per ring step when the ring crosses hosts
    bandwidth_share: float
    max_bus_bytes_per_s: float = 0.0

    def __post_init__(self):
        nonnegative("ll_call_latency", self.call_latency_s)
        nonnegative("ll_intra_latency", self.intra_latency_s)
        nonnegative("ll_link_latency", self.link_latency_s)
        nonnegative("ll_max_bandwidth", self.max_bus_bytes_per_s)
        if not 0.0 < self.bandwidth_share <= 1.0:
            raise ConfigError("ll_bandwidth_share must be in (0, 1] "
                              f"(got {self.bandwidth_share!r})")

    def share_at(self, bus_bytes_per_s: float) -> float:
        """The share of a path of ``bus_bytes_per_s`` this protocol moves data at."""
        if self.max_bus_bytes_per_s <= 0 or bus_bytes_per_s <= 0:
            return self.bandwidth_share
        return min(self.bandwidth_share, self.max_bus_bytes_per_s / bus_bytes_per_s)


@dataclass(frozen=True)
class Device:
    """An accelerator: its name, sustained compute rate (FLOP/s), and what DDP's own calls
    add to a step on it, its host's and framework's (0: not modelled;
    ``simulator.model.hardware.ddp_calls``): ``ddp_buffer_s`` a buffer broadcast before
    each forward, ``ddp_gradient_s`` a parameter tensor (its gradient into its bucket and
    back); and what its optimizer's step costs (``simulator.model.hardware.optimizer_step``;
    0: not modelled): ``memory_bytes_per_s`` its memory's bandwidth, ``host_call_s`` the
    host's time a Python call of one small kernel."""
    name: str
    flops_per_s: float
    ddp_buffer_s: float = 0.0
    ddp_gradient_s: float = 0.0
    memory_bytes_per_s: float = 0.0
    host_call_s: float = 0.0

    def __post_init__(self):
        positive("device flops", self.flops_per_s)
        nonnegative("ddp_buffer", self.ddp_buffer_s)
        nonnegative("ddp_gradient", self.ddp_gradient_s)
        nonnegative("memory_bandwidth", self.memory_bytes_per_s)
        nonnegative("host_call", self.host_call_s)


@dataclass(frozen=True)
class Hardware:
    """What a cluster of accelerator hosts adds to cores and one link per host.

    * ``device``: each compute slot of a host is one accelerator (one rank each);
    * ``intra``: the link between two devices of a host (each device has its own
      port of that bandwidth); None: the profile's shared memory;
    * ``nics``: NICs per host, each of the cluster link's bandwidth;
    * ``topology``: ``switch`` (non-blocking) or ``two_tier``: leaf switches of
      ``hosts_per_leaf`` hosts whose uplinks carry ``1 / oversubscription`` of
      what their hosts' NICs can send;
    * NCCL: ``call_latency_s`` per collective call, ``channels`` rings or trees
      a collective is split over, each moving at most ``channel_bytes_per_s``
      (0: no cap); ``ll`` and ``ll128``: its low-latency protocols (None: not run),
      and ``protocol``: which one a ring allreduce runs (``auto``: the fastest, as
      NCCL 2.5 and later's tuner picks; ``nccl-2.2`` and ``nccl-2.3``: the size rules
      of those releases, ``ll_by_size``); ``release``: the NCCL release the costs are
      read from (said in the provenance); ``kernel_channels``: the channels its kernels
      run on one host, where the LL and LL128 rings are priced by the kernel's chunks
      (``libraries.nccl``; 0: by the tuner's even spread);
    * ``host_link``: a device's copy to or from pinned host memory (PCIe), which a
      collective staged through the host pays each way (gloo on accelerator hosts,
      Horovod's hierarchical allreduce); None: not described.
    """
    device: Device | None = None
    intra: Link | None = None
    nics: int = 1
    topology: str = "switch"
    hosts_per_leaf: int = 0
    oversubscription: float = 1.0
    call_latency_s: float = 0.0
    channels: int = 1
    channel_bytes_per_s: float = 0.0
    ll: LowLatency | None = None
    protocol: str = "auto"
    ll_threshold_bytes: float = LL_THRESHOLD_BYTES
    ll_thread_bytes: float = 0.0      # "nccl-2.3": NCCL's threadThreshold (0: not given)
    ll128: LowLatency | None = None   # NCCL's LL128 protocol (None: not run)
    release: str = ""                 # the NCCL release whose costs these are
    kernel_channels: int = 0          # the channels NCCL's kernels run on one host (its
                                      # chunks priced, libraries.nccl); 0: not modelled
    ring_plateau: float = 1.0         # a Simple ring allreduce across hosts of at least
    ring_plateau_bytes: float = 0.0   # this many bytes per rank: its step latencies times
                                      # ring_plateau (NCCL's "plateau effect of ring")
    compute_slowdown: float = 0.0     # compute runs 1 + this slower while a collective is
                                      # in flight on its device (NCCL's kernels take SMs
                                      # and memory bandwidth); 0: not modelled
    precision_slowdowns: tuple[tuple[str, float], ...] = ()   # (precision, slowdown) where
                                      # a precision has its own (compute_slowdown_<precision>)
    host_link: Link | None = None     # a device's copies to and from pinned host memory

    def __post_init__(self):
        positive("nics", self.nics)
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"unknown NCCL protocol {self.protocol!r} "
                              f"(choose from {', '.join(PROTOCOLS)})")
        if self.protocol in ("ll", "nccl-2.2", "nccl-2.3") and self.ll is None:
            raise ConfigError(f"protocol = \"{self.protocol}\" needs the LL protocol's costs in "
                              "[nccl]: ll_call_latency, ll_intra_latency, ll_link_latency, "
                              "ll_bandwidth_share")
        if self.protocol == "ll128" and self.ll128 is None:
            raise ConfigError("protocol = \"ll128\" needs the LL128 protocol's costs in [nccl]: "
                              "ll128_call_latency, ll128_intra_latency, ll128_link_latency, "
                              "ll128_bandwidth_share")
        nonnegative("ll_threshold", self.ll_threshold_bytes)
        if self.protocol == "nccl-2.3" and self.ll_thread_bytes <= 0:
            raise ConfigError("protocol = \"nccl-2.3\" needs ll_thread_threshold in [nccl]: "
                              "\"32B\" for Pascal and older GPUs, \"64B\" for Volta and newer")
        positive("channels", self.channels)
        positive("oversubscription", self.oversubscription)
        if self.ring_plateau < 1.0:
            raise ConfigError(f"ring_plateau must be at least 1 (got {self.ring_plateau})")
        nonnegative("ring_plateau_bytes_per_rank", self.ring_plateau_bytes)
        nonnegative("compute_slowdown", self.compute_slowdown)
        for precision, value in self.precision_slowdowns:
            nonnegative(f"compute_slowdown_{precision}", value)
        if self.topology not in TOPOLOGIES:
            raise ConfigError(f"unknown topology {self.topology!r} "
                              f"(choose from {', '.join(TOPOLOGIES)})")
        if self.topology == "two_tier":
            positive("hosts_per_leaf", self.hosts_per_leaf)
        if self.call_latency_s < 0 or self.channel_bytes_per_s < 0:
            raise ConfigError("NCCL call latency and channel bandwidth must not be negative")

    def slowdown_at(self, precision: str) -> float:
        """How much slower compute in ``precision`` runs while a collective is in flight:
        the precision's own ``compute_slowdown_<precision>``, else ``compute_slowdown``."""
        return dict(self.precision_slowdowns).get(precision, self.compute_slowdown)

    def leaf_of(self, host: int) -> int:
        return host // self.hosts_per_leaf if self.topology == "two_tier" else 0

    def ll_by_size(self, n_bytes: float, ranks: int, across_hosts: bool) -> bool:
        """Whether a ring allreduce of ``n_bytes`` over ``ranks`` runs LL under the size
        rule of ``protocol``. NCCL 2.1-2.2: up to ``NCCL_LL_THRESHOLD`` bytes a call
        (16 KiB unless set). NCCL 2.3-2.4 (``ncclGetCollResource`` in 2.3.7's
        ``src/include/common_coll.h``, ``getKernelInfo`` in 2.4.8's ``src/enqueue.cc``):
        up to ``threadThreshold`` bytes per thread of 256 threads per rank and ring,
        the threshold doubled when the communicator spans nodes::

            n <= ranks * channels * 256 * thread_bytes * (2 if across hosts else 1)
        """
        if self.protocol == "nccl-2.2":
            return n_bytes <= self.ll_threshold_bytes
        per_thread = self.ll_thread_bytes * (2 if across_hosts else 1)
        return n_bytes <= ranks * self.channels * LL_MAX_THREADS * per_thread


@dataclass(frozen=True)
class Cluster:
    hosts: int
    cores_per_host: int                # compute slots: cores, or the accelerators of a host
    link: Link | None = None           # needed as soon as hosts > 1
    placement: str = "round_robin"
    shared_cores: bool = False         # True: one pool of cores_per_host cores for ALL hosts
                                       # (emulated hosts on one machine); links stay per host
    ranks_per_host: int | None = None  # packed: ranks on a host before the next (None: its cores)
    hardware: Hardware | None = None   # accelerators, intra-host link, NICs, topology, NCCL
    cpu_cores: int = 0                 # accelerator hosts: CPU cores for the input pipeline
                                       # (0: not modelled)
    name: str = ""                     # a preset's name, or the file it came from
    sources: tuple[tuple[str, str], ...] = ()   # (field, where its value came from)

    def __post_init__(self):
        whole("hosts", self.hosts, 1, MAX_HOSTS)
        whole("cores_per_host", self.cores_per_host, 1, MAX_CORES_PER_HOST)
        if self.ranks_per_host is not None:
            whole("ranks_per_host", self.ranks_per_host, 1)
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement {self.placement!r} "
                              f"(choose from {', '.join(PLACEMENTS)})")
        if self.hosts > 1 and self.link is None:
            raise ConfigError("a cluster of several hosts needs a link (bandwidth and latency)")
        if not isinstance(self.shared_cores, bool):
            raise ConfigError(f"shared_cores must be true or false (got {self.shared_cores!r})")

    def host_of(self, rank: int) -> int:
        if self.placement == "packed":
            return (rank // (self.ranks_per_host or self.cores_per_host)) % self.hosts
        return rank % self.hosts

    def placement_of(self, ranks: int) -> tuple[int, ...]:
        return tuple(self.host_of(r) for r in range(ranks))

    def core_pool_of(self, host: int) -> int:
        """Which pool of cores a host computes on: its own, or the one shared pool (0)."""
        return 0 if self.shared_cores else host

    @property
    def core_pools(self) -> int:
        return 1 if self.shared_cores else self.hosts

    @property
    def device(self) -> Device | None:
        """The accelerator of every host, or None where the cores compute."""
        return self.hardware.device if self.hardware else None

    def source_of(self, field: str) -> str:
        return dict(self.sources).get(field, "")

    def without_ddp_calls(self) -> Cluster:
        """This cluster with its device's ``ddp_buffer`` and ``ddp_gradient`` at 0: a run
        without DDP, or a step measured under DDP that carries DDP's calls already."""
        if self.device is None:
            return self
        hw = self.hardware
        device = replace(hw.device, ddp_buffer_s=0.0, ddp_gradient_s=0.0)
        return replace(self, hardware=replace(hw, device=device))

    def at(self, ranks: int) -> Cluster:
        """The cluster a run of ``ranks`` ranks has: these hosts (see ``GrowingCluster``)."""
        return self

    def hosts_at(self, ranks: int) -> int:
        """``at(ranks).hosts``, without making the cluster."""
        return self.hosts


@dataclass(frozen=True)
class GrowingCluster:
    """Hosts of ``base``'s kind, as many as the ranks of a run fill (packed, one rank a
    slot): a preset's, or a file's without ``hosts``. ``at(ranks)``, as ``Cluster.at``,
    gives the cluster of one run."""
    base: Cluster
    one_host_linked: bool = True       # False: a run on one host has no link (shared memory)

    def at(self, ranks: int) -> Cluster:
        hosts = self.hosts_at(ranks)
        link = self.base.link if hosts > 1 or self.one_host_linked else None
        return replace(self.base, hosts=hosts, placement="packed", link=link)

    def hosts_at(self, ranks: int) -> int:
        """``at(ranks).hosts``, without making the cluster (a sweep's checks ask it for
        every point before any is made: ``simulator.engine.sweep.check_request``)."""
        return max(1, -(-ranks // (self.base.ranks_per_host or self.base.cores_per_host)))


def calibrated_cluster(cores: int) -> Cluster:
    """The machine the profile was measured on: one host, shared memory only."""
    return Cluster(hosts=1, cores_per_host=cores)


@dataclass(frozen=True)
class LinkCalibration:
    """What ``python -m calibrate.link`` measured on one emulated link, for links at any rate.

    A record names the rate tc shaped its links to; the payload rate a message
    sees is ``payload_efficiency`` of it (the shaper counts headers too), and a
    message pays ``latency_s`` more. Both are measured at one shaped rate and
    applied at every other: ``t(n) = latency_s + n / (payload_efficiency * shaped)``.
    """
    latency_s: float
    payload_efficiency: float
    shaped_bits_per_s: float            # the rate it was measured at
    source: str = ""
    socket_buffer_bytes: float = 0.0    # crosses before the receive is posted (0: not measured)
    ack_share: float = 0.0              # the reverse direction's share an ACK stream takes
    cpu_s_per_message: float = 0.0      # a rank's CPU per message sent or received (gloo)
    cpu_s_per_byte: float = 0.0         # ... per byte, beside the wake-ups (Link.cpu_s_per_byte)
    cpu_s_per_wakeup: float = 0.0       # ... per wake-up of the receiver (Link.cpu_s_per_wakeup)


def load_link_calibration(path: str | Path) -> LinkCalibration:
    """Read the cluster TOML of ``calibrate.link`` (needs link.shaped_bandwidth)."""
    cluster = load_cluster(path)
    raw = tomllib.loads(Path(path).read_text())
    shaped = raw.get("link", {}).get("shaped_bandwidth")
    if cluster.link is None or shaped is None:
        raise ConfigError(f"cluster file {path}: value link.shaped_bandwidth is missing "
                          f"(write the file with python -m calibrate.link)")
    try:
        shaped_bytes = parse_bandwidth(shaped)
    except ValueError as e:
        raise ConfigError(f"cluster file {path}: link.shaped_bandwidth: {e}") from None
    efficiency = cluster.link.bandwidth_bytes_per_s / shaped_bytes
    burst = raw.get("fit", {}).get("burst_bytes", 0) * efficiency
    per_byte, per_wakeup = cpu_per_byte_and_wakeup(cluster.link, burst)
    return LinkCalibration(latency_s=cluster.link.latency_s, payload_efficiency=efficiency,
                           shaped_bits_per_s=8 * shaped_bytes, source=str(path),
                           socket_buffer_bytes=cluster.link.socket_buffer_bytes,
                           ack_share=cluster.link.ack_share,
                           cpu_s_per_message=cluster.link.cpu_s_per_message,
                           cpu_s_per_byte=per_byte, cpu_s_per_wakeup=per_wakeup)


# gloo's CPU over the emulated cluster of the 2-core VM, the half round trip of its ping-pong
# (``python benchmarks/gloo_wire_cpu.py --summary``, docs/results/gloo-wire-cpu): a byte
# where the shaper does not segment (500 Mbit/s - 10 Gbit/s, less the wake-ups there), and a
# wake-up from the rise of the CPU a byte where it does (100, 200 Mbit/s). For the part a
# calibration's own link cannot show.
PROBED_CPU_S_PER_BYTE = 0.35e-9
PROBED_CPU_S_PER_WAKEUP = 8.7e-6


def cpu_per_byte_and_wakeup(link: Link, burst_bytes: float) -> tuple[float, float]:
    """A calibrated link's CPU per byte beside the wake-ups, and per wake-up of the
    receiver. A file with ``cpu_per_wakeup`` has both; an older one has only its CPU a byte
    at its own link (of ``burst_bytes``, payload), which is mostly wake-ups where the
    shaper segments (a wake-up per 1448 bytes: the wake-up is what it measures, the byte
    takes the probe's price) and mostly bytes where it does not (a wake-up per 64 KiB:
    the byte is what it measures, the wake-up the probe's), each at least 0."""
    if link.cpu_s_per_wakeup or not link.cpu_s_per_byte:
        return link.cpu_s_per_byte, link.cpu_s_per_wakeup
    u = delivered_bytes(burst_bytes)
    if u == SEGMENT_PAYLOAD_BYTES:
        per_byte = min(PROBED_CPU_S_PER_BYTE, link.cpu_s_per_byte)
        return per_byte, 2 * u * (link.cpu_s_per_byte - per_byte)
    return (max(0.0, link.cpu_s_per_byte - PROBED_CPU_S_PER_WAKEUP / (2 * u)),
            PROBED_CPU_S_PER_WAKEUP)


# ---------------------------------------------------------------- cluster files

def load_cluster(path: str | Path, origin: str | None = None) -> Cluster:
    """Read a cluster TOML file; a missing, negative or unit-less value raises
    ConfigError naming the file, the field and what to write. Values without a
    ``source`` of their own are attributed to ``origin`` (default: the file)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"cluster file {path} does not exist") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cluster file {path} is not a text file") from None
    except IsADirectoryError:
        raise ConfigError(f"cluster file {path} is a folder") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cluster file {path} cannot be read: {e}") from None
    try:
        return cluster_from_dict(raw, origin or f"user: {path}")
    except ConfigError as e:
        raise ConfigError(f"cluster file {path}: {e}") from None


# the presets ship as data of the simulator package, installed beside this one
PRESETS_DIR = Path(__file__).resolve().parents[1] / "simulator" / "data" / "presets"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml") if p.stem != "devices")


def load_preset(name: str) -> Cluster:
    """A cluster preset shipped in ``simulator/data/presets`` (every number sourced)."""
    path = PRESETS_DIR / f"{name}.toml"
    if name not in preset_names():
        raise ConfigError(f"unknown preset {name!r} (choose from {', '.join(preset_names())})")
    return load_cluster(path, origin=f"preset {name}")


class _Reader:
    """Values of one file section by section; each value's source is noted."""

    def __init__(self, raw: dict, origin: str):
        self.raw, self.origin = raw, origin
        self.sources: list[tuple[str, str]] = []

    def section(self, name: str) -> dict | None:
        v = self.raw.get(name)
        if v is not None and not isinstance(v, dict):
            raise ConfigError(f"[{name}] must be a table")
        return v

    def get(self, section: str, key: str, default=None):
        d = self.section(section) or {}
        if key not in d:
            if default is None:
                raise ConfigError(f"value {section}.{key} is missing")
            return default
        v = d[key]
        source = self.origin
        if isinstance(v, dict):
            if "value" not in v:
                raise ConfigError(f"value {section}.{key} is a table without 'value'")
            source = f"{self.origin}: {v['source']}" if v.get("source") else self.origin
            v = v["value"]
        self.sources.append((f"{section}.{key}", source))
        return v

    def integer(self, section: str, key: str, default=None) -> int:
        v = self.get(section, key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"value {section}.{key} must be a positive integer (got {v!r})")
        return v

    def number(self, section: str, key: str, default=None) -> float:
        v = self.get(section, key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ConfigError(f"value {section}.{key} must be a positive number (got {v!r})")
        return float(v)

    def parsed(self, section: str, key: str, parse, default=None):
        v = self.get(section, key, default)
        try:
            return parse(v)
        except ValueError as e:
            raise ConfigError(f"value {section}.{key}: {e}") from None

    def link(self, section: str) -> Link:
        bandwidth = self.parsed(section, "bandwidth", parse_bandwidth)
        efficiency = self.number(section, "payload_efficiency", 1.0)
        if efficiency > 1:
            raise ConfigError(f"value {section}.payload_efficiency must be at most 1 "
                              f"(got {efficiency})")
        return Link(bandwidth * efficiency, self.parsed(section, "latency", parse_duration),
                    self.parsed(section, "socket_buffer", parse_bytes, "0B"),
                    self.get(section, "ack_share", 0.0),
                    self.parsed(section, "cpu_per_message", parse_duration, "0s"),
                    self.parsed(section, "cpu_per_byte", parse_duration, "0s"),
                    cpu_s_per_wakeup=self.parsed(section, "cpu_per_wakeup", parse_duration, "0s"))


def _known(raw: dict) -> None:
    """Every section and key of a cluster file is one this module reads (or [fit])."""
    for key, value in raw.items():
        if key in TOP_KEYS:
            continue
        if key not in SECTION_KEYS:
            raise ConfigError(f"unknown section [{key}] (known: "
                              f"{', '.join(SECTION_KEYS)})")
        if not isinstance(value, dict):
            raise ConfigError(f"[{key}] must be a table")
        unknown = [k for k in value if SECTION_KEYS[key] is not None
                   and k not in SECTION_KEYS[key]]
        if unknown:
            raise ConfigError(f"unknown key(s) in [{key}]: {', '.join(map(repr, unknown))} "
                              f"(known: {', '.join(SECTION_KEYS[key])})")


def cluster_from_dict(raw: dict, origin: str = "user") -> Cluster:
    _known(raw)
    r = _Reader(raw, origin)
    if r.section("cluster") is None:
        raise ConfigError("section [cluster] is missing")
    # no hosts: as many as a prediction's ranks fill (``simulator.describe``), one until then
    hosts = r.integer("cluster", "hosts") if "hosts" in r.section("cluster") else 1
    devices = "devices_per_host" in r.section("cluster")
    slots = r.integer("cluster", "devices_per_host" if devices else "cores_per_host")
    placement = r.get("cluster", "placement", "packed" if devices else "round_robin")
    shared_cores = r.get("cluster", "shared_cores", False)
    link = None
    if r.section("link") is not None:
        link = r.link("link")
    elif hosts > 1:
        raise ConfigError("section [link] is missing (needed for more than one host)")
    hardware = _hardware(r, devices)
    per_host = r.integer("cluster", "ranks_per_host") if "ranks_per_host" in r.section(
        "cluster") else None
    cpu = r.integer("cluster", "cpu_cores") if "cpu_cores" in r.section("cluster") else 0
    return Cluster(hosts=hosts, cores_per_host=slots, link=link, placement=placement,
                   shared_cores=shared_cores, hardware=hardware, ranks_per_host=per_host,
                   cpu_cores=cpu,
                   name=str(raw.get("name", "")), sources=tuple(r.sources))


def _hardware(r: _Reader, devices: bool) -> Hardware | None:
    """The accelerator, intra-host, NIC, topology and NCCL parts, where the file has any."""
    parts = ("device", "intra", "topology", "nccl", "host_link")
    nics = (r.section("link") or {}).get("nics")
    if not devices and nics is None and all(r.section(s) is None for s in parts):
        return None
    device = None
    if r.section("device") is not None:
        device = Device(str(r.get("device", "name")),
                        r.parsed("device", "flops", parse_flop_rate),
                        r.parsed("device", "ddp_buffer", parse_duration, "0s"),
                        r.parsed("device", "ddp_gradient", parse_duration, "0s"),
                        (r.parsed("device", "memory_bandwidth", parse_bandwidth)
                         if "memory_bandwidth" in r.section("device") else 0.0),
                        r.parsed("device", "host_call", parse_duration, "0s"))
    elif devices:
        raise ConfigError("section [device] is missing (name and flops of the accelerator)")
    topo = r.section("topology") or {}
    kind = r.get("topology", "kind", "switch") if topo else "switch"
    return Hardware(
        device=device,
        intra=r.link("intra") if r.section("intra") is not None else None,
        nics=r.integer("link", "nics", 1) if nics is not None else 1,
        topology=kind,
        hosts_per_leaf=r.integer("topology", "hosts_per_leaf") if kind == "two_tier" else 0,
        oversubscription=r.number("topology", "oversubscription", 1.0) if topo else 1.0,
        call_latency_s=(r.parsed("nccl", "call_latency", parse_duration, "0us")
                        if r.section("nccl") is not None else 0.0),
        channels=r.integer("nccl", "channels", 1) if r.section("nccl") is not None else 1,
        channel_bytes_per_s=(r.parsed("nccl", "channel_bandwidth", parse_bandwidth)
                             if "channel_bandwidth" in (r.section("nccl") or {}) else 0.0),
        ll=_low_latency(r, "ll"),
        ll128=_low_latency(r, "ll128"),
        release=str(r.get("nccl", "release", "")) if r.section("nccl") is not None else "",
        kernel_channels=(r.integer("nccl", "kernel_channels")
                         if "kernel_channels" in (r.section("nccl") or {}) else 0),
        ring_plateau=r.number("nccl", "ring_plateau", 1.0) if r.section("nccl") is not None
        else 1.0,
        ring_plateau_bytes=(r.parsed("nccl", "ring_plateau_bytes_per_rank", parse_bytes, "0B")
                            if r.section("nccl") is not None else 0.0),
        compute_slowdown=(r.number("nccl", "compute_slowdown")
                          if "compute_slowdown" in (r.section("nccl") or {}) else 0.0),
        precision_slowdowns=tuple(
            (p, r.number("nccl", f"compute_slowdown_{p}")) for p in ("fp32", "tf32", "amp")
            if f"compute_slowdown_{p}" in (r.section("nccl") or {})),
        protocol=str(r.get("nccl", "protocol", "auto")),
        ll_threshold_bytes=r.parsed("nccl", "ll_threshold", parse_bytes, f"{LL_THRESHOLD_BYTES}B"),
        ll_thread_bytes=r.parsed("nccl", "ll_thread_threshold", parse_bytes, "0B"),
        host_link=(Link(r.parsed("host_link", "bandwidth", parse_bandwidth),
                        r.parsed("host_link", "latency", parse_duration, "0us"))
                   if r.section("host_link") is not None else None))


def _low_latency(r: _Reader, name: str) -> LowLatency | None:
    """NCCL's LL (``name`` = "ll") or LL128 protocol where the [nccl] section prices it
    (all four ``{name}_*`` keys; ``{name}_max_bandwidth`` optional)."""
    keys = tuple(f"{name}_{k}" for k in ("call_latency", "intra_latency", "link_latency",
                                          "bandwidth_share"))
    given = [k for k in keys if k in (r.section("nccl") or {})]
    if not given:
        return None
    if len(given) < len(keys):
        missing = ", ".join(k for k in keys if k not in given)
        raise ConfigError(f"[nccl] prices the {name.upper()} protocol only in part: "
                          f"add {missing}")
    cap = (r.parsed("nccl", f"{name}_max_bandwidth", parse_bandwidth)
           if f"{name}_max_bandwidth" in r.section("nccl") else 0.0)
    return LowLatency(*(r.parsed("nccl", k, parse_duration) for k in keys[:3]),
                      r.number("nccl", keys[3]), cap)
