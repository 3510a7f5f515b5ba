"""python -m calibrate.link: bad flags are refused before it looks for a cluster."""
from __future__ import annotations

import pytest

from calibrate.probes import link
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("argv,named", [
    (["--repeats", "0"], "--repeats"),
    (["--repeats", "-1"], "--repeats"),
    (["--repeats", "nan"], "--repeats"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--timeout", "0"], "--timeout"),
    (["--sizes", ""], "--sizes"),
    (["--sizes", "a"], "--sizes"),
    (["--sizes", "1"], "--sizes"),
    (["--sizes", "1e20"], "--sizes"),
    (["--sizes", "64,nan"], "--sizes"),
    (["--out", "cluster.txt"], "--out"),
    (["--prefix", "UPPER"], "--prefix"),
    (["--prefix", "../x"], "--prefix"),
    (["--prefix", "a" * 20], "--prefix"),
    (["--prefix", ""], "--prefix"),
    (["--bogus"], "--bogus"),
])
def test_bad_flags(argv, named, tmp_path, capsys):
    refused(link.main, ["--out", tmp_path / "c.toml"] + argv, named, capsys)
    assert not (tmp_path / "c.toml").exists()


def test_bad_paths(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    refused(link.main, ["--out", tmp_path], "--out", capsys)
    refused(link.main, ["--out", tmp_path / "f" / "c.toml"], "--out", capsys)
    refused(link.main, ["--workdir", tmp_path / "f"], "--workdir", capsys)


def test_no_cluster_up(tmp_path, capsys, monkeypatch):
    from real.cluster import state
    monkeypatch.setattr(state, "STATE_DIR", tmp_path)
    refused(link.main, ["--out", tmp_path / "c.toml", "--prefix", "nothere"],
            "no emulated cluster", capsys)
