"""python -m calibrate.fit: damaged probe tables and bad paths are refused whole, in one line.

A table with a truncated line, a NaN, a negative time or text where a count
belongs is named with its line and column; no profile is written.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate.fits import fit
from tests.refusal import refused
from tests.test_calibrate_cli import synthetic_workdir

pytestmark = pytest.mark.timeout(60)


def workdir(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    synthetic_workdir(d, np.random.default_rng(0))
    return d


def test_bad_flags_and_paths(tmp_path, capsys):
    d = workdir(tmp_path)
    (tmp_path / "f").write_text("x")
    out = ["--out", tmp_path / "p.json"]
    for argv, named in [
        (["--workdir", tmp_path / "none"] + out, "--workdir"),
        (["--workdir", tmp_path / "f"] + out, "--workdir"),
        (["--workdir", tmp_path] + out, "compute_steps.csv"),
        (["--workdir", d, "--out", tmp_path / "p.txt"], "--out"),
        (["--workdir", d, "--out", tmp_path], "--out"),
        (["--workdir", d, "--runs", tmp_path / "none"] + out, "--runs"),
        (["--workdir", d, "--max-workers", "0"] + out, "--max-workers"),
        (["--workdir", d, "--max-workers", "x"] + out, "--max-workers"),
        (["--show", tmp_path / "none.json"], "--show"),
        (["--show", tmp_path / "f"], str(tmp_path / "f")),
        (["--bogus"], "--bogus"),
    ]:
        refused(fit.main, argv, named, capsys)
    assert not (tmp_path / "p.json").exists()


DAMAGE = {
    "binary steps": ("compute_steps.csv", lambda p: p.write_bytes(b"\x89PNG\x00\xff\xfe"),
                     "compute_steps.csv"),
    "truncated steps": ("compute_steps.csv", lambda p: p.write_text(p.read_text()[:-30]),
                        "line"),
    "nan step": ("compute_steps.csv",
                 lambda p: p.write_text(p.read_text().replace(",cnn,", ",cnn,", 1)
                                        .replace("\n", "\nnan-row\n", 1)), "compute_steps.csv"),
    "text threads": ("compute_steps.csv",
                     lambda p: p.write_text(p.read_text().replace("cnn,1,", "cnn,one,", 1)),
                     "threads"),
    "inf server": ("server.csv", lambda p: p.write_text(p.read_text().replace(",3,", ",3,", 1)
                   .replace("\n1000.0,", "\ninf,", 1)), "params"),
    "negative sharing": ("sharing.csv",
                         lambda p: p.write_text(p.read_text().replace(",1.0\n", ",-1.0\n", 1)),
                         "step_s"),
    "comm no bytes": ("comm_P2_auto.csv",
                      lambda p: p.write_text(p.read_text().replace("bytes", "size", 1)),
                      "bytes"),
    "models not json": ("models.json", lambda p: p.write_text("{"), "models.json"),
    "models a list": ("models.json", lambda p: p.write_text("[1]"), "models.json"),
    "meta NaN cores": ("compute_meta.json",
                       lambda p: p.write_text(p.read_text().replace('"cores": 2', '"cores": NaN')),
                       "cores"),
    "meta without host": ("compute_meta.json",
                          lambda p: p.write_text(json.dumps({"cores": 2})), "host"),
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_damaged_probe_tables(name, tmp_path, capsys):
    d = workdir(tmp_path)
    file, change, named = DAMAGE[name]
    change(d / file)
    line = refused(fit.main, ["--workdir", d, "--out", tmp_path / "p.json", "--no-plot"], named,
                   capsys)
    assert file in line
    assert not (tmp_path / "p.json").exists()
