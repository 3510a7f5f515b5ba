"""Bad input as a user types it: what every command must answer.

``refused(main, argv, named, capsys)`` calls a command's ``main(argv)`` in this
process and checks the promise of the project's commands: exit code 2, one
line on stderr that names what is wrong, no traceback, and no hang: ``python -m``
is given a timeout and a test file sets a per-test time limit, so a hang fails
the test instead of the suite. How fast the answer comes is not asserted: a
loaded machine is slower, and the suite must not depend on a machine's speed.
``refused_cli`` does the same through ``python -m``.
"""
from __future__ import annotations

import sys

from tests.conftest import run_cmd


def _check(code, err: str, named: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, f"exit code {code}, stderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err[-3000:]}"
    assert named.lower() in lines[0].lower(), f"{named!r} not named in: {lines[0]}"
    return lines[0]


def refused(main, argv, named: str, capsys) -> str:
    """Run ``main(argv)`` here; returns the one line it printed."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    _, err = capsys.readouterr()
    return _check(code, err, named)


def refused_cli(module: str, argv, named: str, **kw) -> str:
    """Run ``python -m module argv`` as a user would; returns the one line it printed."""
    r = run_cmd([sys.executable, "-m", module, *map(str, argv)], timeout=120, **kw)
    return _check(r.returncode, r.stderr, named)
