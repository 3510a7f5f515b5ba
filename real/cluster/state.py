"""The emulated cluster's description: what ``up`` built, kept in ``/run/<prefix>-cluster.json``.

``Cluster`` is enough for any launcher to place processes on it; rates and
bucket sizes are parsed like tc(8) does.

Imports: the standard library only.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from contracts import units

SCHEMA_VERSION = 1
DEFAULT_PREFIX = "psgd"
DEFAULT_SUBNET = "10.77.0.0/24"
STATE_DIR = Path("/run")


@dataclass(frozen=True)
class Cluster:
    """What ``up`` built; enough for any launcher to place processes on it."""
    prefix: str
    namespaces: tuple[str, ...]      # host i runs in namespaces[i]
    addresses: tuple[str, ...]       # host i's IPv4 address on its link
    interface: str                   # the link's name inside every host namespace
    subnet: str
    bridge_namespace: str
    bridge: str
    bandwidth_bits_per_s: int        # per link and direction
    burst_bytes: int                 # token-bucket depth
    hydra_launcher: str              # script that lets mpiexec "ssh" into a namespace
    schema_version: int = SCHEMA_VERSION
    queue_s: float = 0.05            # how long a packet may wait in a shaper (tbf latency);
                                     # clusters written before it existed had 50 ms
    host_queue_packets: int = 0      # a host's own queue behind its shaper, packets (0: the
                                     # shaper's queue_s)
    queue_bytes: int = 0             # each shaper's queue in bytes, as a switch port's buffer
                                     # (0: queue_s of traffic)
    tcp_slow_start_after_idle: int | None = None   # every host's net.ipv4 setting, 0 or 1
                                     # (None: left at the kernel's default, 1)
    tcp_congestion_control: str | None = None      # every host's TCP congestion control
                                     # (None: the machine's default, as clusters written
                                     # before 2026-11-28 left it)

    @property
    def n_hosts(self) -> int:
        return len(self.namespaces)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_bits_per_s / 8

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Cluster:
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"cluster state has schema_version {d.get('schema_version')!r}, "
                             f"this code reads {SCHEMA_VERSION}")
        d = dict(d)
        for key in ("namespaces", "addresses"):
            d[key] = tuple(d[key])
        return cls(**d)


# --- units -------------------------------------------------------------------------

def parse_bandwidth(text: str) -> int:
    """'100mbit' -> 100_000_000 bits/s: the project's one rate parser
    (``contracts.units``: a unit always, bits as tc writes them or bytes as
    MB/s), rounded to whole bits per second for tc."""
    bits = int(round(8 * units.parse_bandwidth(text)))
    if not 8_000 <= bits <= 100e9:
        raise ValueError(f"bandwidth {text!r} = {bits} bit/s is outside 8kbit..100gbit")
    return bits


def parse_size(text: str) -> int:
    """'32kb' -> 32768 bytes.  Units as in tc: b (or none), k/kb, m/mb, g/gb are
    bytes in powers of 1024; kbit, mbit, gbit are bits."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(b|k|kb|m|mb|g|gb|kbit|mbit|gbit)?\s*", text.lower())
    if not m:
        raise ValueError(f"size {text!r} is not a size like 64kb, 1mb or 20000")
    value, unit = float(m.group(1)), m.group(2) or "b"
    scale = {"b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30,
             "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}[unit]
    return int(round(value * scale))


def default_burst_bytes(bandwidth_bits_per_s: int) -> int:
    """Bucket depth: 2 ms of traffic, at least 16 KiB (a few full-size frames).

    Too small a bucket and TCP can't reach the rate; too large and the first
    burst of every message crosses at memory speed."""
    return max(16 * 1024, int(bandwidth_bits_per_s / 8 * 0.002))


# --- state file ------------------------------------------------------------------

def state_path(prefix: str = DEFAULT_PREFIX) -> Path:
    return STATE_DIR / f"{prefix}-cluster.json"


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(prefix: str = DEFAULT_PREFIX) -> Cluster | None:
    """The cluster that ``up`` left running, or None."""
    path = state_path(prefix)
    if not path.exists():
        return None
    try:
        return Cluster.from_json(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError, AttributeError, OSError) as e:
        raise ValueError(f"the state file {path} cannot be read ({type(e).__name__}: {e}); "
                         f"run 'python -m real.cluster down --prefix {prefix}'") from None
