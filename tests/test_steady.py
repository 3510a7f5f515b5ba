"""The steady state (``engine.steady``): a long lock-step run cut short and extrapolated
gives the whole run's answer; the stability test against its closed form."""
from __future__ import annotations

import pytest

import simulator.engine.run as run
from contracts.cluster import calibrated_cluster
from contracts.profile import load_default
from contracts.workload import Workload
from simulator.engine.steady import BATCHES, HALF_WIDTH, checkpoints, stable_pace

WORKLOAD = Workload(model="cnn", batch_per_worker=64, dataset_samples=60000, epochs=1,
                    threads_per_worker=1)


def test_checkpoints_grow_by_half_and_stay_in_the_first_half_of_the_run():
    assert checkpoints(313) == [36, 54, 81, 121]
    assert checkpoints(71) == []                 # 2 x 36 > 71: no check can pay off
    assert all(2 * k <= 1000 for k in checkpoints(1000))


def test_a_steady_pace_is_stable_and_exact():
    ends = [0.25 * j for j in range(40)]
    assert stable_pace(ends, 36) == pytest.approx(0.25)


def test_a_pace_known_only_within_more_than_the_bound_is_not_stable():
    """Batch means that differ by 10% between stretches: the 95% half-width is far above
    HALF_WIDTH, so the run goes on."""
    size = (36 - 18) // BATCHES
    ends, t = [0.0], 0.0
    for j in range(1, 37):
        t += 1.0 if ((j - 1) // size) % 2 else 1.1
        ends.append(t)
    assert HALF_WIDTH < 0.05
    assert stable_pace(ends, 36) is None


def _whole(monkeypatch):
    real = run.simulate_des

    def whole(*args, **kwargs):
        kwargs["steady"] = None
        return real(*args, **kwargs)
    monkeypatch.setattr(run, "simulate_des", whole)


@pytest.mark.parametrize("scheme, workers, mode", [("ddp", 2, "window"),
                                                  ("mpi_allreduce", 4, "until-stable"),
                                                  ("ps_sync", 5, "until-stable")])
def test_cut_short_runs_predict_the_whole_run(monkeypatch, scheme, workers, mode):
    """On the calibrated 2-core machine: P = 2 repeats (a fixed window), P = 4 and 5 are
    oversubscribed (simulated until the pace is stable). Both within 0.5% of the whole
    run, having simulated a fraction of it."""
    profile = load_default()
    short = run.simulate(scheme, workers, WORKLOAD, calibrated_cluster(profile.cores), profile)
    assert run.oversubscribed(*_args(scheme, workers)) == (mode == "until-stable")
    assert short.simulated_iterations < short.iterations_per_worker / 2
    _whole(monkeypatch)
    whole = run.simulate(scheme, workers, WORKLOAD, calibrated_cluster(profile.cores), profile)
    assert whole.simulated_iterations == whole.iterations_per_worker
    assert short.epoch_s == pytest.approx(whole.epoch_s, rel=0.005)
    assert short.compute_s == pytest.approx(whole.compute_s, rel=0.01)


def _args(scheme, workers):
    from simulator.engine.placement import layout
    from simulator.engine.run import resolve_scheme
    spec, cfg = resolve_scheme(scheme)
    prof = load_default()
    return layout(spec, cfg, workers, calibrated_cluster(prof.cores), prof), WORKLOAD
