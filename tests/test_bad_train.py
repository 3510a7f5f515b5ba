"""real.train refuses bad input before it trains: one line, exit code 2, no record written.

Numbers out of range (learning rate, momentum, sizes, timeouts, seeds), names
that would escape the record folder, paths of the wrong kind and data that
would not fit in memory are refused by the parser; what needs the data (a
batch larger than the training set) right after loading it.
"""
from __future__ import annotations

import pytest

from real.launch import train
from tests.refusal import refused, refused_cli

pytestmark = pytest.mark.timeout(60)

TINY = ["--dataset", "synthetic", "--train-size", "128", "--test-size", "64",
        "--model", "linear"]

BAD = [
    (["--momentum", "-1"], "--momentum"),
    (["--momentum", "nan"], "--momentum"),
    (["--momentum", "inf"], "--momentum"),
    (["--momentum", "1.5"], "--momentum"),
    (["--lr", "inf"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--lr", "0"], "--lr"),
    (["--lr", "-0.1"], "--lr"),
    (["--lr-decay", "nan"], "--lr-decay"),
    (["--lr-decay", "1"], "--lr-decay"),
    (["--train-size", "100000000"], "--train-size"),
    (["--dataset", "mnist", "--train-size", "10000000"], "60000 samples"),
    (["--train-size", "0"], "--train-size"),
    (["--train-size", "1e3"], "--train-size"),
    (["--test-size", "0"], "--test-size"),
    (["--batch-size", "99999999999"], "--batch-size"),
    (["--batch-size", "0"], "--batch-size"),
    (["--batch-size", "1000"], "--batch-size"),          # more than the 128 samples
    (["--global-batch", "0"], "--global-batch"),
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "1.5"], "--epochs"),
    (["--epochs", str(10**12)], "--epochs"),
    (["--run-id", "../../x"], "--run-id"),
    (["--run-id", "a/b"], "--run-id"),
    (["--run-id", ".hidden"], "--run-id"),
    (["--run-id", ""], "--run-id"),
    (["--run-id", "x" * 300], "--run-id"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--timeout", "0"], "--timeout"),
    (["--timeout", "-5"], "--timeout"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**70)], "--seed"),
    (["--seed", "nan"], "--seed"),
    (["--log-every", "0"], "--log-every"),
    (["--workers", "0"], "--workers"),
    (["--workers", "100000", "--algorithm", "hogwild"], "--workers"),
    (["--threads", "0"], "--threads"),
    (["--threads", "100000"], "--threads"),
    (["--average-every", "-1"], "--average-every"),
    (["--repeat", "-1"], "--repeat"),
    (["--algorithm", ""], "--algorithm"),
    (["--algorithm", "psgd,allreduce"], "--algorithm"),
    (["--algorithm", "nope"], "--algorithm"),
    (["--model", ""], "--model"),
    (["--dataset", "imagenet"], "--dataset"),
    (["--mpi-allreduce", "tree"], "--mpi-allreduce"),
    (["--preset", "seed999"], "--preset"),
    (["--algorithm", "mpi_allreduce"], "mpirun"),        # needs a launcher
    (["--bogus"], "--bogus"),
]


@pytest.mark.parametrize("argv,named", BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_bad_flags(argv, named, tmp_path, capsys):
    refused(train.main, TINY + argv + ["--out", tmp_path / "runs"], named, capsys)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_paths_of_the_wrong_kind(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    for argv, named in [(["--out", tmp_path / "f"], "--out"),
                        (["--out", tmp_path / "f" / "runs"], "--out"),
                        (["--data-dir", tmp_path / "f"], "--data-dir"),
                        (["--data-dir", tmp_path / "none"], "--data-dir"),
                        (["--progress-file", tmp_path], "--progress-file")]:
        refused(train.main, TINY + argv, named, capsys)
    assert (tmp_path / "f").read_text() == "x"


def test_as_a_user_types_it():
    """Through ``python -m`` (and the launcher wrapper): the same single line."""
    refused_cli("real.train", TINY + ["--run-id", "../../x"], "--run-id")
    refused_cli("real.train", TINY + ["--lr", "inf"], "--lr")
