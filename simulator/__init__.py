"""Predict data-parallel SGD on P workers: a SimPy model of hosts, cores, links and schemes.

The package has three floors over the top-level ``contracts`` (the files the stages
exchange: run record, profile, workload, cluster, units); arrows point down only
(``tests/test_layout.py``):

* ``model/``: what is simulated: workload, hardware, communication, schemes;
* ``engine/``: runs the model (``simulate``: SimPy, or a vectorised fast path);
* the commands at this level (``predict``, ``compare``, ``validate``,
  ``validate_cluster``, ``pool``, ``bench``) and ``output/`` (tables and figures).

From Python::

    from simulator import simulate, Workload, Cluster, Link, SchemeConfig
    hosts = Cluster(hosts=4, cores_per_host=4, link=Link(1.25e9, 20e-6))
    r = simulate("mpi_allreduce", 16, Workload(model="cnn"), hosts)   # the embedded profile
    r.epoch_s, r.compute_s, r.comm_s, r.wait_s

or from the shell: ``python -m simulator.predict --workers 16``. The names are
exported lazily, so ``import simulator`` stays light. Nothing here imports torch or mpi4py.

Imports: nothing at load; each exported name is imported from ``contracts``, ``simulator.model``
or ``simulator.engine`` when first used.
"""
from __future__ import annotations

_EXPORTS = {
    "simulate": ".engine.run", "Result": ".engine.result", "sweep": ".engine.sweep",
    "Workload": "contracts.workload", "Cluster": "contracts.cluster", "Link": "contracts.cluster",
    "load_cluster": "contracts.cluster", "ConfigError": "contracts.checks",
    "SchemeConfig": ".model.config", "Heterogeneity": ".model.config", "SCHEMES": ".model.schemes",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
