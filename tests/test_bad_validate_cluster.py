"""pipelines.validate_cluster refuses bad rates, counts and paths before a cluster comes up."""
from __future__ import annotations

import pytest

from pipelines import validate_cluster
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)

BAD = [
    (["--bandwidths", ""], "--bandwidths"),
    (["--bandwidths", "fast"], "--bandwidths"),
    (["--bandwidths", "200mbit,nan"], "--bandwidths"),
    (["--bandwidths", "0mbit"], "--bandwidths"),
    (["--bandwidths", "1e999gbit"], "--bandwidths"),
    (["--calibrate-at", "5gbit"], "--calibrate-at"),
    (["--calibrate-at", "x"], "--calibrate-at"),
    (["--schemes", "hogwild"], "--schemes"),
    (["--schemes", "bogus"], "--schemes"),
    (["--workers", "0"], "--workers"),
    (["--workers", "1000"], "--workers"),
    (["--batch-size", "0"], "--batch-size"),
    (["--train-size", "0"], "--train-size"),
    (["--repeats", "0"], "--repeats"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--timeout", "0"], "--timeout"),
    (["--model", "resnet"], "resnet"),
    (["--bogus"], "--bogus"),
]


@pytest.mark.parametrize("argv,named", BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_flags(argv, named, tmp_path, capsys):
    refused(validate_cluster.main, ["--out", tmp_path / "c"] + argv, named, capsys)
    assert not (tmp_path / "c").exists()


def test_bad_paths(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    for argv, named in [(["--out", tmp_path / "f"], "--out"),
                        (["--profile", tmp_path / "none.json"], "--profile"),
                        (["--figure", tmp_path], "--figure"),
                        (["--figure", tmp_path / "f.txt"], "--figure")]:
        refused(validate_cluster.main, ["--skip-runs"] + argv, named, capsys)
    bad = tmp_path / "p.json"
    bad.write_text('{"schema_version": 1, "cores": NaN}')
    refused(validate_cluster.main, ["--out", tmp_path / "c", "--profile", bad], "cores", capsys)


def test_skip_runs_with_nothing_to_compare(tmp_path, capsys):
    from contracts.profile import load_default, save
    out = tmp_path / "c"
    out.mkdir()
    save(load_default(), out / "profile.json")
    refused(validate_cluster.main, ["--out", out, "--skip-runs"], "link.toml", capsys)
    (out / "link.toml").write_text("[cluster]\nhosts = 3\ncores_per_host = 2\n[link]\n"
                                   "bandwidth = '200mbit'\nlatency = '50us'\n"
                                   "shaped_bandwidth = '200mbit'\n")
    refused(validate_cluster.main, ["--out", out, "--skip-runs"], "no completed run records",
            capsys)
