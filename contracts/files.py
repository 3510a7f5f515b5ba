"""Files every stage writes, written atomically: a reader never sees half a file.

Each writer makes a temporary sibling and renames it over the target, so an
interrupted command leaves the old file (or none), never a torn one.

Imports: the standard library (a figure brings its own matplotlib).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def readable_mode(tmp: str | os.PathLike) -> None:
    """Give a temporary file the mode a plain ``open`` would have (mkstemp makes it 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary sibling and a rename."""
    return _atomic_write(path, text, "w")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary sibling and a rename."""
    return _atomic_write(path, data, "wb")


def _atomic_write(path: str | os.PathLike, data: str | bytes, mode: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
        readable_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def save_figure(fig, path: str | os.PathLike, dpi: int = 120, tight: bool = True) -> Path:
    """Save a matplotlib figure atomically; a pyplot figure is closed after (a bare
    ``Figure``, which the simulator draws to spare pyplot's import, needs no closing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
        readable_mode(tmp)
        os.replace(tmp, path)
    finally:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            pyplot.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_json(path: str | os.PathLike, error: type[Exception]) -> Any:
    """The JSON in ``path``; a missing, unreadable or malformed file raises ``error``, one
    line naming the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise error(f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise error(f"{path} is not valid JSON") from None
    except OSError as e:
        raise error(f"{path} cannot be read: {e.strerror or e}") from None
