"""A run's identity on the measuring side: the settings that change its result.

``contracts.record.RESULT_SETTINGS`` lists them; this module fills them
from ``real.train``'s flags (the dataset resolved to the model's own when not
given), so that ``real.train`` writes them into every record and ``real.sweep``
computes, before a point runs, the digest its record will carry.

Imports: real.training.models (the models' own datasets), contracts.record.
"""
from __future__ import annotations

from contracts import record


def run_settings(args, workers: int, cluster: dict | None = None) -> dict:
    """The result settings of a ``real.train`` run with flags ``args`` (its parsed
    namespace), ``workers`` workers, on the emulated cluster ``cluster`` (or None)."""
    from real.training.models import default_dataset
    config = dict(vars(args), dataset=args.dataset or default_dataset(args.model))
    return record.result_settings(config, workers, cluster)


def record_settings(rec: dict) -> dict:
    """A record's result settings (from its config where an older record has none)."""
    from real.training.models import DEFAULT_DATASET
    return record.settings_of(rec, DEFAULT_DATASET)


def record_digest(rec: dict, without=()) -> str:
    """A record's digest; ``without`` leaves settings out (``record.PER_POINT_SETTINGS``:
    the digest a sweep's table shares)."""
    return record.config_digest(record_settings(rec), without)
