"""SimPy simulator of data-parallel SGD: hosts, cores, workers, links, parameter servers.

Predict how long a training scheme takes on P workers, on the calibrated
machine or on a described cluster::

    from simulator.simulate import simulate          # -> Result
    from simulator.config import Workload, Cluster, Link, SchemeConfig, Heterogeneity
    r = simulate("mpi_allreduce", 16, Workload(model="cnn"))   # embedded profile, calibrated host
    r.epoch_s, r.compute_s, r.comm_s, r.wait_s

or from the shell: ``python -m simulator.predict --workers 16``. The config
names are also exported here, lazily, so that ``import simulator.profile``
(used by ``calibrate``) stays light. Nothing here imports torch or mpi4py.
"""
from __future__ import annotations

_EXPORTS = {
    "simulate": "run", "Result": "run",
    "Workload": "config", "Cluster": "config", "Link": "config", "SchemeConfig": "config",
    "Heterogeneity": "config", "ConfigError": "config", "load_cluster": "config",
    "sweep": "sweep", "SCHEMES": "schemes",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
