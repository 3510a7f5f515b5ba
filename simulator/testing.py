"""Profiles built in code, for tests and examples: every number chosen, nothing measured.

``make_profile()`` gives an idealised machine (perfect processor sharing, one
model ``toy`` of round numbers); keyword arguments change any of it.

Imports: simulator.contracts.profile.
"""
from __future__ import annotations

from simulator.contracts.profile import (
    ModelCost,
    Profile,
    Provenance,
    ServerCost,
    StepFit,
    Transport,
)


def make_profile(cores: int = 4, step_intercept_s: float = 0.002,
                 step_s_per_sample: float = 0.0001, spread_cv: float = 0.0,
                 layer_param_counts: tuple[int, ...] = (1000, 10, 200_000, 50, 5000, 10),
                 backward_fraction: float = 0.6,
                 alpha_s: float = 1e-5, beta_s_per_byte: float = 1e-9,
                 gamma_s_per_byte: float = 0.0,
                 sharing_slowdown: dict[int, float] | None = None,
                 update_intercept_s: float = 1e-4, update_s_per_param: float = 1e-9,
                 model: str = "toy", quantum_s: float = 0.0,
                 collective_alpha_s: dict[str, float] | None = None,
                 cpu_fraction: float = 0.0, balance_delay_s: float = 0.0) -> Profile:
    layers = tuple(layer_param_counts)
    steps = tuple(StepFit(threads=t, step_intercept_s=step_intercept_s / t,
                          step_s_per_sample=step_s_per_sample / t, spread_cv=spread_cv)
                  for t in (1, 2, 4))
    transports = tuple(Transport(b, alpha_s, beta_s_per_byte, gamma_s_per_byte,
                                 dict(collective_alpha_s or {}), cpu_fraction=cpu_fraction)
                       for b in ("mpi", "gloo"))
    return Profile(
        provenance=Provenance(host="test", cores=cores, created_utc="1970-01-01T00:00:00Z",
                              note="built in code by simulator.testing"),
        cores=cores,
        models=(ModelCost(model, sum(layers), layers, steps, backward_fraction),),
        transports=transports,
        sharing_slowdown=dict(sharing_slowdown or {}),
        server=ServerCost(update_intercept_s, update_s_per_param),
        scheduler_quantum_s=quantum_s,
        balance_delay_s=balance_delay_s,
    )
