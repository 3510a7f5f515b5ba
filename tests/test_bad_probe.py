"""python -m calibrate.probe: a missing or bad part, plan or folder is one line, exit code 2."""
from __future__ import annotations

import pytest

from calibrate.probes import probe
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("argv,named", [
    ([], "--part"),
    (["--part", "disk"], "--part"),
    (["--part", "compute", "--batches", "x"], "--batches"),
    (["--part", "compute", "--threads", "0"], "--threads"),
    (["--part", "compute", "--repeats", "0"], "--repeats"),
    (["--part", "compute", "--timeout-s", "nan"], "--timeout-s"),
    (["--part", "compute", "--models", "resnet"], "resnet"),
    (["--part", "sharing", "--sharing", "1000"], "--sharing"),
    (["--part", "comm", "--algorithm", "tree"], "--algorithm"),
    (["--part", "comm"], "mpirun"),
    (["--part", "compute", "--bogus"], "--bogus"),
])
def test_bad_flags(argv, named, tmp_path, capsys, monkeypatch):
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    refused(probe.main, argv + ["--workdir", tmp_path / "w"], named, capsys)
    assert not (tmp_path / "w").exists()


def test_workdir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    refused(probe.main, ["--part", "compute", "--workdir", tmp_path / "f"], "--workdir", capsys)
