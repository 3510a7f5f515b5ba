"""A sweep is refused or let through from its plan, before any of its points is made.

``simulator.engine.sweep.check_request`` counts the simulations a plan asks for and their
cost (``cost_of``) from each scheme's P and ``cluster.hosts_at(ranks)`` alone: ``--workers
65536`` is half a million points, which took seconds to make only to be refused. The count
must be what would run (a scheme that needs one host is left out where its ranks take
more), so the message's "N simulations" is true and no request that the points' own
cost lets through is refused.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.checks import ConfigError
from contracts.cluster import Cluster, GrowingCluster, Link
from contracts.workload import Workload
from simulator import predict, question
from simulator.engine import sweep
from simulator.model.config import SchemeConfig
from simulator.model.schemes import SCHEMES

LINK = Link(bandwidth_bytes_per_s=1e9, latency_s=1e-5)


def _cost_of_points(points, workload: Workload) -> tuple[int, float, int]:
    """The cost rule applied to made points (as check_request applied it before plans)."""
    work, largest = 0.0, 0
    for pt in points:
        on, p = pt.cluster, pt.workers
        iterations = workload.iterations_per_worker(p)
        per_pool = max(1, -(-SCHEMES[pt.scheme.name].ranks(p) // on.core_pools))
        work += p * iterations * max(1.0, per_pool / on.cores_per_host)
        largest = max(largest, p * iterations)
    return len(points), work, largest


@settings(max_examples=60, deadline=None)
@given(workers=st.lists(st.integers(1, 40), min_size=1, max_size=6),
       baseline=st.integers(1, 4),
       names=st.lists(st.sampled_from(list(SCHEMES)), min_size=1, max_size=4, unique=True),
       cores=st.integers(1, 6), per_host=st.none() | st.integers(1, 8),
       hosts=st.none() | st.integers(1, 5), shared=st.booleans(),
       epochs=st.floats(0.1, 3.0), batch=st.integers(1, 300))
def test_a_plans_cost_is_that_of_the_points_it_makes(workers, baseline, names, cores, per_host,
                                                     hosts, shared, epochs, batch):
    base = Cluster(hosts=1, cores_per_host=cores, link=LINK, ranks_per_host=per_host,
                   shared_cores=shared)
    cluster = GrowingCluster(base) if hosts is None else replace(base, hosts=hosts)
    workload = Workload(batch_per_worker=batch, dataset_samples=1000, epochs=epochs)
    plan = [(SchemeConfig(n), sweep.counts_of(cluster, SchemeConfig(n), workers, baseline))
            for n in names]
    points = sweep.points_of(cluster, plan)
    for cfg, counts in plan:           # a single-host scheme where its ranks take one host
        spec = SCHEMES[cfg.name]
        asked = [1] if spec.single_worker else sorted(set(workers) | {baseline})
        assert counts == [p for p in asked if not spec.single_host
                          or cluster.at(spec.ranks(p)).hosts == 1]
    for pt in points:
        ranks = SCHEMES[pt.scheme.name].ranks(pt.workers)
        assert cluster.hosts_at(ranks) == pt.cluster.hosts
    cost = sweep.cost_of(plan, cluster, workload, runs_each=3)
    simulations, work, largest = _cost_of_points(points, workload)
    assert (cost.simulations, cost.largest) == (3 * simulations, largest)
    assert cost.worker_iterations == pytest.approx(3 * work, rel=1e-12)


# 400 psgd points of 1000 iterations on 2-core hosts and hogwild at P = 1, 2 (its ranks take
# two hosts from P = 3): 8.02e7 worker-iterations, about 27 minutes, under the half hour of
# REFUSE_ABOVE_S; hogwild counted at every P would double it. At 1200 iterations: 32 minutes.
NEAR_THE_LIMIT = ["--workers", "1-400", "--schemes", "hogwild,psgd", "--cores-per-host", "2",
                  "--no-plot"]


def test_a_sweep_near_the_limit_is_refused_before_a_point_is_made(monkeypatch, capsys):
    monkeypatch.setattr(sweep, "point", lambda *a: pytest.fail("a point was made"))
    args = predict.build_parser().parse_args([*NEAR_THE_LIMIT, "--iterations", "1200"])
    with pytest.raises(ConfigError, match=r"would run 402 simulations of 9\.62e\+07 "
                                          r"worker-iterations in all, about 32 minutes"):
        question.resolve(args)


def test_a_sweep_just_under_the_limit_is_let_through(capsys):
    args = predict.build_parser().parse_args([*NEAR_THE_LIMIT, "--iterations", "1000"])
    points = question.resolve(args).sweep.points
    assert [(pt.scheme.name, pt.workers) for pt in points if pt.scheme.name == "hogwild"] == [
        ("hogwild", 1), ("hogwild", 2)]
    assert len(points) == 402
    assert "predict: note: 402 simulations, about 27 minutes" in capsys.readouterr().err
