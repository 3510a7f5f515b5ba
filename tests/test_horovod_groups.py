"""Horovod's grouped allreduces (0.21's ``num_groups``): each tensor handed over with the
last gradient of its group, checked by hand, against Horovod's ``split_list`` and as a
whole step."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.checks import ConfigError
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.model.schemes.fusion import group_starts, handed_over
from tests.test_hardware import gpu_cluster, gpu_profile


def split_list(items, n):
    """``horovod/common/util.py`` at v0.21.0, as published."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


@given(n=st.integers(1, 300), groups=st.integers(1, 400))
def test_the_groups_start_where_horovods_split_list_cuts(n, groups):
    chunks = [c for c in split_list(list(range(n)), groups) if c]
    assert group_starts(n, groups) == [c[0] for c in chunks]


def test_a_tensor_is_handed_over_with_the_last_gradient_of_its_group():
    """Four tensors in ready order (the forward's last first), two groups of the forward
    order {0, 1} and {2, 3}: ready tensors 0-1 form the second group, done at 0.3 of the
    backward; 2-3 the first, done at its end."""
    tensors = [(10, 0.1), (10, 0.2), (10, 0.3), (10, 0.4)]
    assert handed_over(tensors) == pytest.approx([0.1, 0.3, 0.6, 1.0])
    assert handed_over(tensors, 2) == pytest.approx([0.3, 0.3, 1.0, 1.0])
    assert handed_over(tensors, 1) == pytest.approx([1.0] * 4)
    # five tensors in two groups: the forward's first three, then two (split_list: 3 + 2)
    five = [(1, 0.2)] * 5
    assert handed_over(five, 2) == pytest.approx([0.4, 0.4, 1.0, 1.0, 1.0])


@settings(max_examples=60, deadline=None)
@given(shares=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40),
       groups=st.integers(0, 50))
def test_grouping_only_delays_and_keeps_the_order(shares, groups):
    tensors = [(1, s) for s in shares]
    own, grouped = handed_over(tensors), handed_over(tensors, groups)
    assert all(g >= o - 1e-12 for g, o in zip(grouped, own))
    assert all(b >= a - 1e-12 for a, b in zip(grouped, grouped[1:]))
    assert len(set(grouped)) <= (groups or len(shares))
    if groups >= len(shares):
        assert grouped == pytest.approx(own)


@pytest.mark.parametrize("engine", ["fast", "des"])
def test_one_group_is_one_tensor_of_all_the_gradients(engine):
    """num_groups = 1: every gradient is handed over at the end of the backward, fused
    into one buffer: a step as of a model whose gradients are one tensor of the same
    bytes."""
    work = Workload(model="toy", batch_per_worker=16, iterations=4)
    cluster = gpu_cluster(hosts=2)
    cfg = SchemeConfig("horovod", algorithm="ring", engine=engine, cycle_s=0.0,
                       horovod_groups=1)
    three = simulate(cfg, 8, work, cluster, gpu_profile(params=(2_000_000, 500_000, 40_000)))
    one = simulate(cfg, 8, work, cluster, gpu_profile(params=(2_540_000,)))
    alone = simulate(SchemeConfig("horovod", algorithm="ring", engine=engine, cycle_s=0.0),
                     8, work, cluster, gpu_profile(params=(2_000_000, 500_000, 40_000)))
    assert three.time_s == pytest.approx(one.time_s, rel=1e-9)
    assert three.time_s != pytest.approx(alone.time_s, rel=1e-6)


@pytest.mark.parametrize("groups,ahead_", [(1, False), (2, False), (3, True), (2, True)])
def test_the_fast_path_groups_as_the_simpy_model(groups, ahead_):
    work = Workload(model="toy", batch_per_worker=16, iterations=5)
    runs = [simulate(SchemeConfig("horovod", algorithm="ring", engine=e, cycle_s=0.004,
                                  fusion_bytes=3_000_000, requests_ahead=ahead_,
                                  horovod_groups=groups),
                     8, work, gpu_cluster(hosts=2), gpu_profile())
            for e in ("fast", "des")]
    assert runs[0].time_s == pytest.approx(runs[1].time_s, rel=1e-9)


def test_negative_groups_are_refused():
    with pytest.raises(ConfigError, match="horovod_groups"):
        SchemeConfig("horovod", horovod_groups=-1)
