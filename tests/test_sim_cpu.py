"""The CPU of a sleeping backend's calls (``Transport.cpu_fraction``): closed forms."""
import json

import pandas as pd
import pytest

from calibrate.fits.fit_comm import cpu_fractions
from simulator.model.comm.closed_forms import ring_allreduce_s
from contracts.cluster import Cluster
from contracts.profile import ProfileError, Transport, from_dict, to_dict
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.engine.placement import handoffs
from simulator.engine.run import resolve_scheme
from simulator.model.comm import call_cpu_s
from simulator.model.config import SchemeConfig
from simulator.testing import make_profile

F = 0.6
A, B = 1e-4, 1e-9
CL2 = Cluster(hosts=1, cores_per_host=2)


def test_call_cpu_is_the_fraction_of_the_contention_free_time():
    t = Transport("gloo", A, B, cpu_fraction=F, collective_alpha_s={"allreduce": 3 * A})
    n = 40_000
    assert call_cpu_s(t, "allreduce", 4, n, "ring", False) == pytest.approx(
        F * ring_allreduce_s(4, n, 3 * A, B))
    # a gather's root takes in P-1 messages; every other rank sends its own only
    assert call_cpu_s(t, "gather", 5, n, "-", True) == pytest.approx(F * (A + 4 * n * B))
    assert call_cpu_s(t, "gather", 5, n, "-", False) == pytest.approx(F * (A + n * B))
    assert call_cpu_s(t, "allreduce", 1, n, "ring", True) == 0.0
    assert call_cpu_s(Transport("gloo", A, B), "allreduce", 4, n, "ring", False) == 0.0


def test_cpu_costs_nothing_while_every_rank_has_a_core():
    wl = Workload(model="toy", iterations=3)
    plain = simulate("allreduce", 2, wl, CL2, make_profile(cores=2, alpha_s=A))
    busy = simulate("allreduce", 2, wl, CL2, make_profile(cores=2, alpha_s=A, cpu_fraction=F))
    assert busy.time_s == pytest.approx(plain.time_s, rel=1e-12)


@pytest.mark.parametrize("engine", ["fast", "des"])
def test_oversubscribed_calls_stretch_to_their_cpu_over_the_core_share(engine):
    """4 ranks on 2 cores: each compute step runs at half speed, and each per-tensor
    allreduce takes max(D, F D / (1/2)) = 2 F D > D (tensors of whole segments: gloo's
    ring is the ring's closed form)."""
    prof = make_profile(cores=2, alpha_s=A, beta_s_per_byte=B, cpu_fraction=F,
                        layer_param_counts=(1000, 16, 200_000, 56, 5000, 16))
    wl = Workload(model="toy", iterations=3, batch_per_worker=32)
    r = simulate(SchemeConfig("allreduce", engine=engine), 4, wl, CL2, prof)
    step = prof.models[0].step_fit(1).step_s(32)
    calls = sum(max(1.0, 2 * F) * ring_allreduce_s(4, 4 * c, A, B)
                for c in prof.models[0].tensor_counts)
    assert r.time_s == pytest.approx(3 * (2 * step + calls), rel=1e-9)
    assert r.comm_s == pytest.approx(3 * calls, rel=1e-9)


@pytest.mark.parametrize("scheme", ["allreduce", "gather_scatter"])
def test_fast_path_and_simpy_agree_with_cpu(scheme):
    prof = make_profile(cores=2, alpha_s=A, spread_cv=0.3, cpu_fraction=F, quantum_s=0.004)
    wl = Workload(model="toy", iterations=6)
    fast = simulate(SchemeConfig(scheme, engine="fast"), 5, wl, CL2, prof)
    des = simulate(SchemeConfig(scheme, engine="des"), 5, wl, CL2, prof)
    assert fast.time_s == pytest.approx(des.time_s, rel=1e-9)
    assert fast.comm_s == pytest.approx(des.comm_s, rel=1e-9)


def test_ddp_with_cpu_runs_on_simpy_where_its_buckets_share_the_backward_cores():
    wl = Workload(model="toy", iterations=2)
    assert simulate("ddp", 2, wl, CL2, make_profile(cores=2)).engine == "fast"
    assert simulate("ddp", 2, wl, CL2, make_profile(cores=2, cpu_fraction=F)).engine == "des"


def test_only_polling_receivers_wait_for_their_turn():
    prof = make_profile(cores=2, quantum_s=0.004)
    for name, polls in (("allreduce", False), ("ddp", False), ("mpi_allreduce", True),
                        ("ps_sync", True)):
        spec, _ = resolve_scheme(name)
        waits = handoffs(spec, CL2, CL2.placement_of(5), 4, prof)
        assert (max(waits) > 0) == polls, name


def _rows(backend, workers, op, n, wall, cpu):
    return {"backend": backend, "workers": workers, "op": op, "algorithm": "-", "bytes": n,
            "rep": 0, "rank": 0, "time_s": wall, "cpu_s": cpu}


def test_cpu_fractions_from_probe_rows():
    rows = [_rows("gloo", 2, "allreduce", 4, 1e-3, 0.5e-3),
            _rows("gloo", 2, "allreduce", 2**20, 1.0, 0.7),       # sizes weigh the same
            _rows("gloo", 2, "sendrecv", 4, 1e-3, 0.0),           # ping-pong: not a collective
            _rows("gloo", 3, "allreduce", 4, 1e-3, 1e-3),         # larger P: not used
            _rows("mpi", 2, "bcast", 4, 1e-5, 1e-5)]
    got = cpu_fractions(pd.DataFrame(rows))
    assert got == pytest.approx({"gloo": 0.6, "mpi": 1.0})
    assert cpu_fractions(pd.DataFrame(rows), max_workers=1) == {}
    assert cpu_fractions(pd.DataFrame(rows).drop(columns="cpu_s")) == {}   # older probes


def test_profile_keeps_cpu_fraction_and_refuses_a_bad_one():
    prof = make_profile(cpu_fraction=F)
    d = json.loads(json.dumps(to_dict(prof)))
    assert from_dict(d) == prof
    d["transports"][1]["cpu_fraction"] = 1.5
    with pytest.raises(ProfileError, match="cpu_fraction"):
        from_dict(d)
    for t in d["transports"]:
        del t["cpu_fraction"]
    assert from_dict(d).transport("gloo").cpu_fraction == 0.0     # older profiles load


def test_allreduce_latency_per_step_from_training_runs():
    from calibrate.fits.fit_comm import run_allreduce_alpha
    t = Transport("gloo", A, B)
    counts = (100, 10, 5000)
    a_step = 7.5e-4
    per_iter = sum(ring_allreduce_s(2, 4 * c, a_step, B) for c in counts)
    comm = pd.DataFrame({"model": "toy", "workers": 2, "comm_s": [per_iter] * 5})
    assert run_allreduce_alpha(comm, {"toy": counts}, t) == pytest.approx(a_step)
    assert run_allreduce_alpha(comm, {}, t) is None                  # no tensor counts
    assert run_allreduce_alpha(comm.iloc[:0], {"toy": counts}, t) is None
