"""Files every stage writes, written atomically: a reader never sees half a file.

Each writer makes a temporary sibling and renames it over the target, so an
interrupted command leaves the old file (or none), never a torn one.

Imports: the standard library; matplotlib when a figure is saved.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def readable_mode(tmp: str | os.PathLike) -> None:
    """Give a temporary file the mode a plain ``open`` would have (mkstemp makes it 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary sibling and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        readable_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        readable_mode(tmp)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
