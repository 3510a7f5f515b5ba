"""Write the TOML files this project reads with ``tomllib`` (which only reads).

``dumps(data)`` writes a dict of plain values: scalars and lists of scalars as
``key = value``, dicts as ``[tables]``, lists of dicts as ``[[arrays of
tables]]``; a list of dicts that hold only scalars (tensors, step lines) is
written inline, one ``{...}`` per line, to keep long lists readable. Keys whose
value is None are left out. Comments can be placed above a table with a
``"#"`` key (a string or a list of lines). Imports: the standard library only.
"""
from __future__ import annotations

import json
import math


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML cannot hold {v!r}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)       # a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_scalar(x)}" for k, x in v.items()
                                if x is not None) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def _flat(v) -> bool:
    """A dict that holds only scalars (and lists of scalars)."""
    return isinstance(v, dict) and not any(isinstance(x, dict) or _is_table_list(x)
                                           for x in v.values())


def _is_table_list(v) -> bool:
    return isinstance(v, (list, tuple)) and bool(v) and all(isinstance(x, dict) for x in v)


def _comment(d: dict) -> list[str]:
    c = d.get("#")
    if c is None:
        return []
    return [f"# {line}".rstrip() for line in ([c] if isinstance(c, str) else c)]


def _body(d: dict, path: str, out: list[str]) -> None:
    tables = []
    for k, v in d.items():
        if k == "#" or v is None:
            continue
        if isinstance(v, dict):
            tables.append((k, v, False))
        elif _is_table_list(v) and not all(_flat(x) for x in v):
            tables.append((k, v, True))
        elif _is_table_list(v):
            out.append(f"{_key(k)} = [")
            out.extend(f"  {_scalar(x)}," for x in v)
            out.append("]")
        else:
            out.append(f"{_key(k)} = {_scalar(v)}")
    for k, v, many in tables:
        name = f"{path}.{_key(k)}" if path else _key(k)
        for item in (v if many else [v]):
            out.append("")
            out.extend(_comment(item))
            out.append(f"[[{name}]]" if many else f"[{name}]")
            _body(item, name, out)


def dumps(data: dict) -> str:
    out = _comment(data)
    _body(data, "", out)
    return "\n".join(out).lstrip("\n") + "\n"
