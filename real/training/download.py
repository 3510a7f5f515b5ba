"""Checksummed downloads: a file is given its real name only once its md5 matches.

Used by ``real.training.data`` for the datasets' mirrors. Every failure is a ``FetchError``
whose message is one line saying what went wrong and what to do.

Imports: tqdm.
"""
from __future__ import annotations

import hashlib
import http.client
import os
import socket
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

DOWNLOAD_TIMEOUT_S = 60.0


class FetchError(Exception):
    """No mirror served the file with the expected checksum."""


def join_url(base: str, name: str) -> str:
    return base if base.endswith(name) else base.rstrip("/") + "/" + name


def fetch(urls: Sequence[str], dest: Path, md5: str, dataset: str) -> None:
    """Download ``dest`` from the first of ``urls`` that serves a file with this md5."""
    failures, offline = [], True
    for url in urls:
        try:
            _fetch_one(url, dest, md5)
            return
        except _ChecksumMismatch as mismatch:
            failures.append(f"{url}: {mismatch}")
            offline = False
        except urllib.error.HTTPError as error:
            failures.append(f"{url}: HTTP {error.code} {error.reason}")
            offline = False
        except (urllib.error.URLError, socket.timeout, ConnectionError,
                http.client.HTTPException) as error:
            failures.append(f"{url}: {getattr(error, 'reason', error)}")
    tried = "; ".join(failures)
    if offline:
        raise FetchError(f"cannot download {dataset}: offline or no mirror reachable ({tried}); "
                        f"copy the files into {dest.parent} or pass --data-dir DIR")
    raise FetchError(f"cannot download {dest.name} for {dataset} ({tried}); nothing was kept in "
                    f"{dest.parent}; try again later or pass --data-dir DIR")


class _ChecksumMismatch(Exception):
    pass


def _fetch_one(url: str, dest: Path, md5: str) -> None:
    """Stream ``url`` into a temporary file next to ``dest``; rename it only if its md5 matches."""
    from tqdm import tqdm  # only needed here; keeps importing this module light

    handle, partial = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        digest = hashlib.md5(usedforsecurity=False)
        with os.fdopen(handle, "wb") as out, \
                urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            total_bytes = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total_bytes, unit="B", unit_scale=True, desc=dest.name,
                      disable=not sys.stderr.isatty()) as progress:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    progress.update(len(chunk))
        if digest.hexdigest() != md5:
            raise _ChecksumMismatch(f"md5 {digest.hexdigest()} is not the expected {md5}")
        os.replace(partial, dest)
    finally:
        Path(partial).unlink(missing_ok=True)
