"""python -m calibrate.sched_probe: bad process counts and step sizes, one line each."""
from __future__ import annotations

import pytest

from calibrate.probes import sched_probe
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("argv,named", [
    (["--check", ""], "--check"),
    (["--check", "a"], "--check"),
    (["--check", "0"], "--check"),
    (["--check", "3,-5"], "--check"),
    (["--check", "1000"], "--check"),
    (["--check", "2.5"], "--check"),
    (["--leaves", "--check", "1000"], "--check"),
    (["--work-ms", "nan"], "--work-ms"),
    (["--work-ms", "inf"], "--work-ms"),
    (["--work-ms", "0"], "--work-ms"),
    (["--work-ms", "1e9"], "--work-ms"),
    (["--steps", "0"], "--steps"),
    (["--steps", "1e12"], "--steps"),
    (["--bogus"], "--bogus"),
])
def test_bad_flags(argv, named, capsys):
    refused(sched_probe.main, argv, named, capsys)
