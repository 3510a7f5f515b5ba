"""CSV tables read whole and checked: every column there, every cell of its kind, no NaN or inf.

``read_table(path, kinds)`` reads a CSV that a stage of the project wrote (a
run's ``iterations.csv``, ``compare.csv``, a probe's raw table) and converts
each column named in ``kinds`` to its kind; the first cell that is not of
its kind (a truncated last line, a damaged number, ``nan``, ``inf``, text
where a count belongs) raises ``TableError`` naming the file, the line and
the column, so a reader refuses the file instead of loading half of it.

Kinds: ``count`` (whole number >= 0), ``positive_count`` (>= 1), ``int``,
``number`` (finite), ``seconds`` (finite, >= 0), ``positive`` (finite, > 0),
``bool`` (True/False as pandas writes them) and ``text`` (not empty). A
trailing ``?`` lets a cell be empty (read as NaN). Columns not named are kept
as pandas reads them. Imports: the standard library; pandas when called.
"""
from __future__ import annotations

import math
import os
from pathlib import Path


class TableError(ValueError):
    """A CSV file that is not the table it should be; the message names file, line, column."""


_BOOLS = {"true": True, "false": False, "1": True, "0": False}


def _bad_cells(kind: str, text, values):
    """A boolean Series: the cells of one column that are not of ``kind``."""
    empty = text.str.strip() == ""
    base = kind.rstrip("?")
    if base == "text":
        bad = empty
    elif base == "bool":
        bad = ~text.str.strip().str.lower().isin(list(_BOOLS))
    else:
        bad = values.isna() | values.isin([math.inf, -math.inf])
        if base in ("count", "positive_count", "int"):
            bad |= values.notna() & (values != values.round())
        if base in ("count", "seconds"):
            bad |= values < 0
        if base in ("positive_count", "positive"):
            bad |= values <= 0
    return bad & ~empty if kind.endswith("?") else bad


def read_table(path: str | os.PathLike, kinds: dict[str, str]):
    """The CSV at ``path`` as a DataFrame, each column of ``kinds`` checked and converted."""
    import pandas as pd
    path = Path(path)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise TableError(f"{path} does not exist") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise TableError(f"{path} is not a readable table ({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise TableError(f"{path} cannot be read: {e.strerror or e}") from None
    missing = [c for c in kinds if c not in raw.columns]
    if missing:
        raise TableError(f"{path} lacks column(s) {', '.join(missing)}")
    out = pd.DataFrame(index=raw.index)
    for col in raw.columns:
        text = raw[col]
        empty = text.str.strip() == ""
        values = pd.to_numeric(text.mask(empty), errors="coerce")
        kind = kinds.get(col)
        if kind is None:                   # not ours to check: as pandas would read it
            out[col] = values if not (values.isna() & ~empty).any() else text
            continue
        bad = _bad_cells(kind, text, values)
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise TableError(f"{path} line {row + 2}: column {col} is {text.iloc[row]!r}, "
                             f"not {_WHAT[kind.rstrip('?')]} (a truncated or damaged file?)")
        base = kind.rstrip("?")
        if base == "bool":
            out[col] = text.str.strip().str.lower().map(_BOOLS)
        elif base == "text":
            out[col] = text
        elif base in ("count", "positive_count", "int") and not kind.endswith("?"):
            out[col] = values.astype("int64")
        else:
            out[col] = values
    return out


_WHAT = {"count": "a whole number >= 0", "positive_count": "a whole number >= 1",
         "int": "a whole number", "number": "a finite number",
         "seconds": "a finite number >= 0", "positive": "a finite number > 0",
         "bool": "True or False", "text": "a name"}
