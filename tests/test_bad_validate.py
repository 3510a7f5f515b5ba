"""pipelines.validate asks every stage about its flags before any stage runs.

``--model resnet`` used to launch every sweep point (each failed); now the
sweep's ``--dry-run`` refuses it first and validate relays that one line.
A stage that refuses its input later says what it refused, not "see the log".
"""
from __future__ import annotations

import pytest

from pipelines import validate
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)

BAD = [
    (["--model", "resnet"], "resnet"),
    (["--dataset", "imagenet"], "imagenet"),
    (["--workers", "0"], "--workers"),
    (["--workers", "1000"], "--workers"),
    (["--workers", "x"], "--workers"),
    (["--schemes", "bogus"], "--schemes"),
    (["--schemes", ""], "--schemes"),
    (["--repeats", "0"], "--repeats"),
    (["--epochs", "0"], "--epochs"),
    (["--train-size", "0"], "--train-size"),
    (["--train-size", "100000000", "--dataset", "synthetic"], "--train-size"),
    (["--calibrate-workers", "0"], "--calibrate-workers"),
    (["--calibrate-workers", "nan"], "--calibrate-workers"),
    (["--bogus"], "--bogus"),
]


@pytest.mark.parametrize("argv,named", BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_flags(argv, named, tmp_path, capsys):
    refused(validate.main, ["--out", tmp_path / "v"] + argv, named, capsys)
    assert not (tmp_path / "v").exists()


def test_bad_out_and_reused_stages(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    refused(validate.main, ["--out", tmp_path / "f"], "--out", capsys)
    refused(validate.main, ["--out", tmp_path / "v", "--skip-sweep"], "--skip-sweep", capsys)
    (tmp_path / "v" / "runs").mkdir(parents=True)
    refused(validate.main, ["--out", tmp_path / "v", "--skip-sweep", "--skip-calibrate"],
            "--skip-calibrate", capsys)
    (tmp_path / "v" / "profile.json").write_text('{"schema_version": 1, "cores": Infinity}')
    refused(validate.main, ["--out", tmp_path / "v", "--skip-sweep", "--skip-calibrate"],
            "cores", capsys)


def test_a_stage_that_refuses_says_why(tmp_path, capsys):
    """Reusing an empty runs folder: compare refuses, and validate says what it said."""
    from contracts.profile import load_default, save
    (tmp_path / "v" / "runs").mkdir(parents=True)
    save(load_default(), tmp_path / "v" / "profile.json")
    line = refused(validate.main, ["--out", tmp_path / "v", "--skip-sweep", "--skip-calibrate"],
                   "no completed run records", capsys)
    assert "stage compare" in line and "see" not in line.split("(")[0]
