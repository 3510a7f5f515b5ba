"""Profiles written by calibrate round-trip; broken, partial and too-new ones are refused by field."""
import json

import pytest

from calibrate.fits import fit
from contracts import profile as prof


def make_profile() -> prof.Profile:
    return prof.Profile(
        provenance=prof.Provenance(host="h", cores=2, created_utc="2026-01-01T00:00:00+00:00",
                                   commands=("python -m calibrate --quick",),
                                   versions={"torch": "2.13.0"}, runs_seen=("r1",),
                                   workers_seen=(1, 2), note="test"),
        cores=2,
        models=(prof.ModelCost("cnn", 21840, (260, 5020, 16050, 510),
                               (prof.StepFit(1, 1e-3, 2e-4, 1e-4, 1e-5, 0.99, 0.05, (16, 32)),),
                               backward_fraction=0.55, eval_s_per_sample=1e-4),),
        transports=(prof.Transport("mpi", 2e-6, 1.6e-10, 3e-11),
                    prof.Transport("gloo", 1.3e-4, 5e-10, 3e-11)),
        sharing_slowdown={1: 1.0, 2: 1.05, 3: 1.5, 4: 2.0},
        server=prof.ServerCost(1.5e-6, 1.3e-10, 0.99),
        collectives=(prof.CollectiveFit("mpi", "allreduce", "ring", 2,
                                        (prof.Segment(0, 65536, 2e-5, 1e-9, n_points=5),
                                         prof.Segment(65537, 2**26, 6e-5, 3e-10, n_points=4)),
                                        0.03, 0.1),))


def test_round_trip(tmp_path):
    p = make_profile()
    prof.save(p, tmp_path / "p.json")
    assert prof.load(tmp_path / "p.json") == p


def _write(tmp_path, mutate):
    d = prof.to_dict(make_profile())
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    return path


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("server"), "server"),
    (lambda d: d["models"][0].pop("param_count"), "models[0].param_count"),
    (lambda d: d["models"][0]["steps"][0].pop("step_s_per_sample"), "models[0].steps[0].step_s_per_sample"),
    (lambda d: d["transports"][1].update(alpha_s="fast"), "transports[1].alpha_s"),
    (lambda d: d["transports"][0].update(beta_s_per_byte=-1.0), "transports[0].beta_s_per_byte"),
    (lambda d: d.update(schema_version=prof.SCHEMA_VERSION + 1), "schema_version"),
    (lambda d: d["provenance"].pop("host"), "provenance.host"),
    (lambda d: d["collectives"][0]["segments"][0].pop("alpha_s"), "collectives[0].segments[0].alpha_s"),
])
def test_broken_profiles_are_refused_naming_the_field(tmp_path, mutate, field):
    with pytest.raises(prof.ProfileError, match=field.replace("[", r"\[").replace("]", r"\]")):
        prof.load(_write(tmp_path, mutate))


def test_too_new_profile_says_upgrade(tmp_path):
    path = _write(tmp_path, lambda d: d.update(schema_version=99))
    with pytest.raises(prof.ProfileError, match="newer than this program reads"):
        prof.load(path)


def test_show_refuses_a_corrupt_profile_with_one_line(tmp_path, capsys):
    path = tmp_path / "corrupt.json"
    path.write_text('{"schema_version": 1, "models": [')
    assert fit.main(["--show", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not valid JSON" in err and "Traceback" not in err


def test_show_prints_the_fit_tables(tmp_path, capsys):
    prof.save(make_profile(), tmp_path / "p.json")
    assert fit.main(["--show", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "allreduce" in out and "cnn" in out
