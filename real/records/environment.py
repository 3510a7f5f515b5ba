"""What a run record says about where it ran: host, cores, launcher, ranks, versions.

Also ``weights_digest``: a short hash of a model's weights, so a record shows
that every rank started from (and ended with) the same weights.

Imports: mpi4py, numpy, torch, real (devices, models).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket


def environment(launch, threads: int, hosts: list[dict] | None = None, device=None) -> dict:
    """Where the run ran: ``hosts`` ([{"host", "ranks"}], from every rank) and ``device``
    (a torch device; ``real.launch.devices.describe``) besides this host's own description."""
    import numpy
    import torch

    from real.launch.devices import describe
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "numpy": numpy.__version__}
    if launch.kind == "mpi":
        import mpi4py
        from mpi4py import MPI
        versions["mpi4py"] = mpi4py.__version__
        versions["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
    dev = describe(device if device is not None else torch.device("cpu"))
    for key in ("cuda_runtime", "nccl", "driver"):
        if dev.get(key):
            versions[key] = dev[key]
    # An emulated cluster (real.sweep --cluster) names itself: hosts, addresses, shaping.
    cluster = json.loads(os.environ["PSGD_CLUSTER"]) if os.environ.get("PSGD_CLUSTER") else None
    return {"host": socket.gethostname(), "cores": os.cpu_count(), "platform": platform.platform(),
            "cpu": _cpu_model(), "launcher": launch.launcher, "launch": launch.kind,
            "ranks": launch.world_size, "ranks_per_host": launch.local_size,
            "hosts": hosts or [{"host": socket.gethostname(), "ranks": [0]}],
            "threads_per_rank": threads, "device": dev,
            "versions": versions, "cluster": cluster}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def weights_digest(model) -> str:
    from real.training.models import flat_params
    return hashlib.sha256(flat_params(model).numpy().tobytes()).hexdigest()[:16]
