"""The old path of the contracts, kept for one release: ``simulator.contracts.X`` is ``X``'s
new module.

The contracts moved to the top-level package ``contracts``, the collectives' closed forms
to ``simulator.model.comm.closed_forms`` and the command-line conventions to ``cli``.
Code outside this repository that imports ``simulator.contracts.profile`` (or ``from
simulator.contracts import profile``) gets the new module itself, not a copy, so its
classes and state are the same objects; importing this package warns once
(``DeprecationWarning``). Nothing in the repository imports it (``tests/test_layout.py``).
It is removed in the release after this one.

Imports: importlib; the moved module when its old name is imported.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {name: f"contracts.{name}" for name in (
    "checks", "cluster", "curve", "files", "profile", "quality", "record", "schedule",
    "stats", "tables", "tomlw", "units", "workload")}
MOVED |= {"cli": "cli", "closed_forms": "simulator.model.comm.closed_forms"}

warnings.warn("simulator.contracts moved: import contracts (file schemas and units), cli and "
              "simulator.model.comm.closed_forms", DeprecationWarning, stacklevel=2)


class _OldPath(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``simulator.contracts.X`` and loads it as the moved module itself."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package == __name__ and name in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        # the import system returns what sys.modules holds under the old name afterwards
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__.rpartition(".")[2]])


if not any(isinstance(f, _OldPath) for f in sys.meta_path):
    sys.meta_path.insert(0, _OldPath())
