"""simulator.pool: bad folders, damaged compare.csv files and bad flags, one line each."""
from __future__ import annotations

import pytest

from simulator import pool
from tests.refusal import refused
from tests.test_pool import write_sweep

pytestmark = pytest.mark.timeout(60)


def test_flags_and_folders(tmp_path, capsys):
    a = write_sweep(tmp_path / "a", (0.04, -0.08))
    (tmp_path / "f").write_text("x")
    (tmp_path / "empty").mkdir()
    for argv, named in [
        ([], "sweeps"),
        ([tmp_path / "none"], "does not exist"),
        ([tmp_path / "f"], "not a folder"),
        ([tmp_path / "empty"], "no compare.csv"),
        ([a, "--labels", "x,y"], "--labels"),
        ([a, "--labels", ""], "--labels"),
        ([a, a, "--labels", "x,"], "--labels"),
        ([a, "--out", tmp_path / "f"], "--out"),
        ([a, "--out", tmp_path / "f" / "o"], "--out"),
        ([a, "--bogus"], "--bogus"),
    ]:
        refused(pool.main, argv, named, capsys)


def _damaged(tmp_path, change) -> str:
    d = write_sweep(tmp_path / "s", (0.04, -0.08))
    path = d / "compare.csv"
    change(path)
    return str(d)


CSV = {
    "binary": (lambda p: p.write_bytes(b"\x89PNG\r\n\x00\xff\xfe"), "compare.csv"),
    "empty": (lambda p: p.write_text(""), "compare.csv"),
    "no columns": (lambda p: p.write_text("a,b\n1,2\n"), "lacks column"),
    "truncated": (lambda p: p.write_text(p.read_text()[:-25]), "line 4"),
    "nan error": (lambda p: p.write_text(p.read_text().replace("0.04", "nan")), "rel_error"),
    "inf measured": (lambda p: p.write_text(p.read_text().replace("10.0", "inf", 1)),
                     "measured_s"),
    "text workers": (lambda p: p.write_text(p.read_text().replace(",3,", ",three,")),
                     "workers"),
    "held_out maybe": (lambda p: p.write_text(p.read_text().replace("True", "maybe", 1)),
                       "held_out"),
    "negative time": (lambda p: p.write_text(p.read_text().replace("10.0", "-10.0", 1)),
                      "measured_s"),
}


@pytest.mark.parametrize("name", list(CSV))
def test_damaged_compare_csv(name, tmp_path, capsys):
    change, named = CSV[name]
    folder = _damaged(tmp_path, change)
    line = refused(pool.main, [folder, "--out", tmp_path / "o"], named, capsys)
    assert "compare.csv" in line
    assert not (tmp_path / "o").exists()
