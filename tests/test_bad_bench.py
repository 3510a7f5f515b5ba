"""simulator.bench refuses sizes it could not run in minutes, and bad numbers, in one line."""
from __future__ import annotations

import pytest

from simulator import bench
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("argv,named", [
    (["--workers", "0"], "--workers"),
    (["--workers", "-1"], "--workers"),
    (["--workers", "nan"], "--workers"),
    (["--workers", "1.5"], "--workers"),
    (["--workers", "1000000000"], "--workers"),
    (["--iterations", "0"], "--iterations"),
    (["--iterations", "1000000000000"], "--iterations"),
    (["--workers", "8192", "--iterations", "100000"], "--workers x --iterations"),
    (["--des-workers", "0"], "--des-workers"),
    (["--des-workers", "100000"], "--des-workers"),
    (["--des-iterations", "0"], "--des-iterations"),
    (["--des-workers", "128", "--des-iterations", "1000"], "--des-workers x --des-iterations"),
    (["--bogus"], "--bogus"),
])
def test_bad_flags(argv, named, capsys):
    refused(bench.main, argv, named, capsys)
