"""python -m calibrate refuses a bad plan or path before any probe runs: one line, exit 2.

Nothing is measured and nothing written (no work folder, no profile) when a
flag is refused; ``--quick --repeats 0`` and ``--timeout-s nan`` among them.
"""
from __future__ import annotations

import pytest

from calibrate import __main__ as cal_main
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)

BAD = [
    (["--repeats", "0"], "--repeats"),
    (["--repeats", "-1"], "--repeats"),
    (["--repeats", "nan"], "--repeats"),
    (["--repeats", "1000000000"], "--repeats"),
    (["--timeout-s", "nan"], "--timeout-s"),
    (["--timeout-s", "inf"], "--timeout-s"),
    (["--timeout-s", "0"], "--timeout-s"),
    (["--timeout-s", "-1"], "--timeout-s"),
    (["--max-workers", "0"], "--max-workers"),
    (["--max-workers", "nan"], "--max-workers"),
    (["--models", ""], "--models"),
    (["--models", "cnn,resnet"], "resnet"),
    (["--batches", "0"], "--batches"),
    (["--batches", "-16"], "--batches"),
    (["--batches", "1e12"], "--batches"),
    (["--batches", ","], "--batches"),
    (["--threads", "0"], "--threads"),
    (["--threads", "99"], "--threads"),
    (["--sharing", "0"], "--sharing"),
    (["--sharing", "1000"], "--sharing"),
    (["--server-params", "1e15"], "--server-params"),
    (["--server-params", "nan"], "--server-params"),
    (["--sizes", "0"], "--sizes"),
    (["--sizes", "1e20"], "--sizes"),
    (["--workers", "1"], "--workers"),
    (["--workers", "1000"], "--workers"),
    (["--algorithms", "tree"], "--algorithms"),
    (["--bogus"], "--bogus"),
]


@pytest.mark.parametrize("argv,named", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_plans(argv, named, tmp_path, capsys):
    work = tmp_path / "w"
    refused(cal_main.main, ["--quick", "--workdir", work, "--out", tmp_path / "p.json"] + argv,
            named, capsys)
    assert not work.exists() and not (tmp_path / "p.json").exists()


def test_bad_paths(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    work = tmp_path / "w"
    for argv, named in [
        (["--out", tmp_path / "p.txt"], "--out"),
        (["--out", tmp_path], "--out"),
        (["--out", tmp_path / "f" / "p.json"], "--out"),
        (["--workdir", tmp_path / "f"], "--workdir"),
        (["--runs", tmp_path / "none"], "--runs"),
        (["--runs", tmp_path / "f"], "--runs"),
    ]:
        defaults = ["--quick", "--workdir", work, "--out", tmp_path / "p.json"]
        refused(cal_main.main, defaults + argv, named, capsys)
    assert not work.exists() and (tmp_path / "f").read_text() == "x"


def test_runs_without_records(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    refused(cal_main.main, ["--quick", "--workdir", tmp_path / "w", "--out", tmp_path / "p.json",
                            "--runs", tmp_path / "runs"], "no run record", capsys)
