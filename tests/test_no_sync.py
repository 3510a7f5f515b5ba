"""DDP's ``no_sync()`` under gradient accumulation (``engine.no_sync``, ``predict
--no-sync``): the gradients cross once every K iterations, over the last micro-step's
backward, against the closed form; DDP's calls and the flag's bad values."""
from __future__ import annotations

from dataclasses import replace

import pytest

from contracts.cluster import Cluster, Device, Hardware, Link
from contracts.workload import Workload
from simulator import predict
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.testing import make_profile

PARAMS = (3_000_000, 8_000_000, 500_000, 2_000_000)
STEP_S = 0.0005 * 32          # step_s_per_sample x batch, no intercept, no spread
BUFFER_S, GRADIENT_S = 20e-6, 7e-6


def _cluster(buffer_s: float = 0.0, gradient_s: float = 0.0, link_bytes_per_s: float = 2e9
             ) -> Cluster:
    """One host of 4 devices, by default on a slow link (a bucket's allreduce is ms: the
    exchange is exposed past the backward), no optimizer model (memory bandwidth 0: the
    steps as given)."""
    hw = Hardware(device=Device("A100 SXM4", 19.5e12, ddp_buffer_s=buffer_s,
                                ddp_gradient_s=gradient_s),
                  intra=Link(link_bytes_per_s, 5e-6), call_latency_s=10e-6)
    return Cluster(hosts=1, cores_per_host=4, placement="packed", hardware=hw)


def _time(iterations: int, every: int, no_sync: bool, engine: str = "fast",
          cluster: Cluster | None = None, buffers: int = 0) -> float:
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    prof = replace(prof, models=(replace(prof.models[0], buffer_count=buffers),))
    work = Workload(model="toy", batch_per_worker=32, iterations=iterations,
                    accumulation_steps=every, no_sync=no_sync)
    return simulate(SchemeConfig("ddp", engine=engine), 4, work, cluster or _cluster(),
                    prof).time_s


@pytest.mark.parametrize("engine", ["fast", "des"])
@pytest.mark.parametrize("iterations,every", [(12, 2), (12, 4), (12, 3)])
def test_the_gradients_cross_once_in_k(engine, iterations, every):
    """Every micro-step s, the exchange exposing e past each steady backward and e1 past
    the first (DDP's first buckets): exchanging every step takes ``I s + e1 + (I - 1) e``;
    under no_sync the G = I / K groups take ``I s + e1 + (G - 1) e``, each exchange over
    the same last backward."""
    e1 = _time(1, 1, False, engine) - STEP_S
    e = (_time(2 * iterations, 1, False, engine) - _time(iterations, 1, False, engine)) \
        / iterations - STEP_S
    assert e > 1e-3                                    # exposed: the test can fail
    groups = iterations // every
    got = _time(iterations, every, True, engine)
    assert got == pytest.approx(iterations * STEP_S + e1 + (groups - 1) * e, rel=1e-9)
    assert _time(iterations, every, False, engine) == pytest.approx(
        iterations * STEP_S + e1 + (iterations - 1) * e, rel=1e-9)


def test_ddps_calls_buffers_every_step_gradients_once_in_k():
    """Inside no_sync() DDP still broadcasts its buffers before each forward but copies no
    gradient into a bucket: I buffers' costs and G gradients' costs (on a fast link, the
    exchange hidden in the backward, so the calls add exactly)."""
    iterations, every, buffers = 12, 4, 10
    fast_link = 1e12
    extra = (_time(iterations, every, True, cluster=_cluster(BUFFER_S, GRADIENT_S, fast_link),
                   buffers=buffers)
             - _time(iterations, every, True, cluster=_cluster(0, 0, fast_link),
                     buffers=buffers))
    assert extra == pytest.approx(iterations * buffers * BUFFER_S
                                  + iterations // every * len(PARAMS) * GRADIENT_S, rel=1e-9)


def test_other_schemes_and_cpu_hosts_exchange_every_step():
    prof = make_profile(layer_param_counts=PARAMS)
    for scheme, cluster in (("allreduce", _cluster()),
                            ("ddp", Cluster(hosts=1, cores_per_host=4, placement="packed"))):
        runs = [simulate(SchemeConfig(scheme), 4, Workload(
            model="toy", batch_per_worker=32, iterations=8, accumulation_steps=4,
            no_sync=flag), cluster, prof).time_s for flag in (False, True)]
        assert runs[0] == runs[1]


def test_predict_per_micro_step_and_its_bad_flag(tmp_path, capsys):
    """The rows count micro-steps whatever the grouping; ``--no-sync`` without K > 1 is
    one line and exit 2."""
    base = ["--preset", "dgx-a100", "--workers", "8", "--schemes", "ddp", "--no-plot",
            "--jobs", "1", "--iterations", "8", "--format", "csv", "--out", str(tmp_path)]
    assert predict.main(base + ["--accumulation-steps", "4", "--no-sync"]) == 0
    assert ",8," in capsys.readouterr().out.splitlines()[1]
    assert predict.main(base + ["--no-sync"]) == 2
    err = capsys.readouterr().err
    assert "--no-sync needs --accumulation-steps K above 1" in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(Exception, match="no_sync must be true or false"):
        replace(Workload(), no_sync="yes")


def test_predict_full_gives_each_mechanisms_cost_at_each_p(tmp_path, capsys):
    """Several P: a cost that moves with P (the last bucket's allreduce, the ranks sharing
    a host's loader cores) is printed for each, one that does not once; the json holds
    every P's rows, its largest P's the same as ``mechanisms``."""
    import json
    from pathlib import Path
    a100 = Path(__file__).resolve().parent.parent / "benchmarks" / "dle" / "resnet50-a100.toml"
    assert predict.main(["--preset", "dgx-a100", "--workload", str(a100), "--precision", "amp",
                         "--workers", "1,8,16", "--schemes", "ddp", "--full", "--no-plot",
                         "--jobs", "1", "--accumulation-steps", "2", "--no-sync",
                         "--out", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    meta = json.loads((tmp_path / "predictions.json").read_text())["meta"]
    by_p = meta["mechanisms_by_workers"]
    assert set(by_p) == {"1", "8", "16"} and by_p["16"] == meta["mechanisms"]
    for p in (1, 8, 16):
        bucket = next(r for r in by_p[str(p)] if r["mechanism"] == "DDP's exposed last bucket")
        assert f"once every 2 iterations (no_sync()) at P = {p} " in bucket["cost"]
        assert f"    P = {p}: " in shown
    assert "with 1 rank on a host's" in shown and "with 8 ranks on a host's" in shown
    assert shown.count("compute beside NCCL") == 1
    assert "(the tensors once every 2 steps: no_sync())" in shown
