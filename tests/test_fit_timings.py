"""A fit from a few timings: it recovers known parameters from synthetic timings and says
which ones the timings cannot pin down."""
from __future__ import annotations

from dataclasses import replace

import pytest

from calibrate.fits import fit as calibrate_fit
from contracts.checks import ConfigError
from contracts.cluster import Cluster, Hardware, Link
from simulator.fit_timings import Model, Timing, fit, main, read_timings
from simulator.testing import make_profile

BASE = Cluster(hosts=4, cores_per_host=8, link=Link(1.25e9, 20e-6), placement="packed",
               hardware=Hardware())


def synthetic(model: Model, rows, truth: dict) -> list[Timing]:
    timings = [Timing(s, p, h, 0.0) for s, p, h in rows]
    return [replace(t, time_s=float(x)) for t, x in zip(timings, model.predict(timings, truth))]


def cpu_model(names) -> Model:
    prof = make_profile(cores=8, layer_param_counts=(1_500_000, 500_000), step_intercept_s=0.0,
                        step_s_per_sample=1e-4)
    return Model(BASE, prof, "toy", 32, names)


ROWS = [("mpi_allreduce", 1, 1), ("mpi_allreduce", 2, 2), ("mpi_allreduce", 4, 4),
        ("mpi_allreduce", 8, 4), ("mpi_allreduce", 16, 4), ("psgd", 8, 4)]


def test_the_fit_recovers_known_parameters():
    names = ("compute", "latency", "bandwidth")
    model = cpu_model(names)
    truth = {"compute": 1.7, "latency": 55e-6, "bandwidth": 0.4e9}     # 3.2 Gbit/s
    result = fit(model, synthetic(model, ROWS, truth))
    for name, value in truth.items():
        assert result.fitted[name] == pytest.approx(value, rel=0.02), name
        assert result.determined[name][0], result.determined[name]
    assert abs(result.residuals).max() < 1e-3


def test_what_the_timings_cannot_pin_down_is_said():
    """Timings on one host never cross the network: latency and bandwidth change nothing."""
    names = ("compute", "latency", "bandwidth")
    model = cpu_model(names)
    one_host = [("mpi_allreduce", 1, 1), ("mpi_allreduce", 2, 1), ("mpi_allreduce", 4, 1)]
    result = fit(model, synthetic(model, one_host, {"compute": 1.3}))
    assert result.fitted["compute"] == pytest.approx(1.3, rel=0.02)
    assert result.determined["compute"][0]
    for name in ("latency", "bandwidth"):
        ok, why = result.determined[name]
        assert not ok and "no timing depends on it" in why


def test_the_command_reads_a_csv_and_writes_fitted_files(tmp_path, capsys):
    model = cpu_model(("compute", "latency", "bandwidth"))
    prof_path = tmp_path / "profile.json"
    from contracts.profile import save
    save(model.profile, prof_path)
    cluster = tmp_path / "cluster.toml"
    cluster.write_text('[cluster]\nhosts = 4\ncores_per_host = 8\nplacement = "packed"\n'
                       '[link]\nbandwidth = "10gbit"\nlatency = "20us"\nnics = 1\n')
    timings = synthetic(model, ROWS, {"compute": 1.2, "latency": 30e-6, "bandwidth": 0.5e9})
    csv = tmp_path / "t.csv"
    csv.write_text("scheme,P,hosts,time_s\n" + "".join(
        f"{t.scheme},{t.workers},{t.hosts},{t.time_s!r}\n" for t in timings))
    code = main(["--timings", str(csv), "--cluster", str(cluster), "--profile", str(prof_path),
                 "--model", "toy", "--batch-size", "32", "--out", str(tmp_path / "fitted")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "bandwidth" in out and "yes" in out
    from contracts.cluster import load_cluster
    fitted = load_cluster(tmp_path / "fitted" / "cluster.toml")
    assert fitted.link.bandwidth_bytes_per_s == pytest.approx(0.5e9, rel=0.02)
    assert any("fitted by" in source for _, source in fitted.sources)


@pytest.mark.parametrize("text,expect", [
    ("scheme,P,hosts\nddp,2,1\n", "time_s missing"),
    ("scheme,P,hosts,time_s\nnope,2,1,0.1\n", "unknown scheme"),
    ("scheme,P,hosts,time_s\nddp,2,3,0.1\n", "hosts <= workers"),
    ("scheme,P,hosts,time_s\n", "has no rows"),
])
def test_bad_timings_files_are_one_line(tmp_path, capsys, text, expect):
    csv = tmp_path / "t.csv"
    csv.write_text(text)
    assert main(["--timings", str(csv)]) == 2
    err = capsys.readouterr().err.strip()
    assert expect in err and str(csv) in err and len(err.splitlines()) == 1
    with pytest.raises(ConfigError):
        read_timings(csv)


@pytest.mark.slow
def test_calibrate_fit_forwards_timings(tmp_path):
    """``python -m calibrate.fit --timings`` runs the simulator's fit (a subprocess)."""
    csv = tmp_path / "t.csv"
    csv.write_text("scheme,P,hosts,time_s\nnope,2,1,0.1\n")
    assert calibrate_fit.main(["--timings", str(csv)]) == 2
