"""The layout's rules, checked on the imports of every module and on the commands it
starts (read with ``ast``, nothing run).

* the ground floor: ``contracts/`` (the files the stages exchange, and units) and
  ``libraries/`` (what MPICH decides) import no other part of the project; ``cli/`` (the
  command-line conventions) and ``report/`` (how a result is stated) only ``contracts``;
* ``real/`` and ``simulator/`` sit side by side over them: neither imports the other;
  ``calibrate/`` measures real's own code and fits by the model's equations, where
  ``CROSSINGS`` names the pair and why;
* ``simulator/`` imports neither torch nor mpi4py, and starts no command of the other
  stages (a ``-m`` module name in its code);
* ``pipelines/`` (the whole loop) sits above the three stages: none of them imports it or
  starts its commands, except the old paths of its commands (``ALIASES``) and
  ``simulator.predict``, which hands ``--target-accuracy`` to ``pipelines.predict``
  (``HANDS_OVER``);
* inside ``simulator/``: model <- engine <- tools (the top-level commands and
  ``output``); no arrow runs back;
* nothing imports ``simulator.contracts``, the old path of ``contracts`` kept for code
  outside the repository;
* no module imports, directly or through others, a module that imports it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contracts", "cli", "libraries", "report", "simulator", "real", "calibrate",
            "pipelines")
STAGES = ("real", "calibrate", "simulator")
ALIASES = {"simulator.validate": "pipelines.validate",         # old paths, for a release
           "simulator.validate_accuracy": "pipelines.validate_accuracy",
           "simulator.validate_cluster": "pipelines.validate_cluster",
           "simulator.validate_phantom": "pipelines.validate_phantom",
           "simulator.replay": "pipelines.replay"}
# a simulator command whose one option moved up: it hands the command line over (runpy)
HANDS_OVER = {"simulator.predict": "pipelines.predict"}    # --target-accuracy, for a release
# a stage's module (or a whole stage) that imports another stage's: (importer, imported) and why
CROSSINGS = {
    # calibration measures what real's own code costs on this machine: a copy would time
    # something else
    ("calibrate.probes", "real.training.models"): "times the models real trains",
    ("calibrate.probes", "real.launch"): "starts its ranks as real does: process groups, "
                                         "mpirun, the devices a run reports",
    ("calibrate.probes.link", "real.cluster"): "measures a link of real's emulated cluster",
    ("calibrate.probes.compute_probe", "real.schemes.ps"): "times the parameter server's "
                                                           "update as the server runs it",
    ("calibrate.fits.runs", "real.schemes"): "fits from the runs of the schemes it names",
    ("calibrate.fits.runs", "real.records.timing"): "reads a record's window as real splits it",
    ("calibrate.__main__", "real.launch.dist"): "runs its probes isolated, as real runs",
    ("calibrate.__main__", "real.records.load"): "waits for a quiet machine by real's "
                                                 "measure of other processes' load",
    ("calibrate.fits.fit_comm", "simulator.model.comm.closed_forms"):
        "fits alpha and beta by the model's equations of the collectives",
    ("calibrate.probes.poll_probe", "simulator.model.comm.closed_forms"):
        "checks the hand-off wait it measures against the model's form",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULE_FILES = {module_name(p) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (function-level imports too)."""
    tree = ast.parse(path.read_text())
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            # ``from pkg import mod`` imports the module; ``from mod import name`` the module
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULE_FILES else base
                         for a in node.names)
    return found


MODULES = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
GRAPH = {m: {i for i in imports_of(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def layer(module: str) -> int:
    """contracts 0, model 1, engine 2, everything else in simulator (tools, output) 3."""
    for name, rank in (("contracts", 0), ("simulator.model", 1), ("simulator.engine", 2)):
        if module == name or module.startswith(name + "."):
            return rank
    return 3


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("simulator")))
def test_simulator_imports_no_training_stack(module):
    bad = {i for i in imports_of(MODULES[module])
           if i.split(".")[0] in ("real", "calibrate")
           or i.split(".")[0] in ("torch", "mpi4py")}
    assert not bad, f"{module} imports {sorted(bad)}"


def commands_started(path: Path) -> set[str]:
    """Modules of the project ``path`` names as a whole string: what it starts with
    ``python -m NAME`` (or runpy), as a subprocess's argument list spells it."""
    folder = {m: ROOT / m.replace(".", "/") for m in MODULE_FILES}
    names = {m for m, f in folder.items() if not f.is_dir() or (f / "__main__.py").exists()}
    return {n.value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("simulator")))
def test_simulator_starts_no_command_of_the_other_stages(module):
    started = {c for c in commands_started(MODULES[module])
               if c.split(".")[0] in ("real", "calibrate", "pipelines")}
    allowed = {ALIASES.get(module), HANDS_OVER.get(module)}
    assert started <= allowed, f"{module} starts {sorted(started - allowed)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES
                                          if m.split(".")[0] in ("simulator", "real", "calibrate")))
def test_no_stage_imports_the_pipelines(module):
    up = {i for i in imports_of(MODULES[module]) if i.split(".")[0] == "pipelines"}
    assert not up, f"{module} imports {sorted(up)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("simulator.")))
def test_simulator_layers_point_down(module):
    up = {i for i in GRAPH[module] if i.startswith("simulator.") and layer(i) > layer(module)}
    assert not up, f"{module} (layer {layer(module)}) imports higher layers {sorted(up)}"


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[0] in STAGES))
def test_the_stages_sit_side_by_side(module):
    stage = module.split(".")[0]
    crossing = {i for i in GRAPH[module] if i.split(".")[0] in STAGES and i.split(".")[0] != stage
                and not any(within(module, a) and within(i, b) for a, b in CROSSINGS)}
    assert not crossing, f"{module} imports another stage's {sorted(crossing)}"


GROUND = {"contracts": set(), "libraries": set(), "cli": {"contracts"}, "report": {"contracts"}}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[0] in GROUND))
def test_the_ground_floor_sits_below_the_stages(module):
    allowed = GROUND[module.split(".")[0]]
    up = {i for i in GRAPH[module] if i.split(".")[0] not in allowed | {module.split(".")[0]}}
    assert not up, f"{module} imports {sorted(up)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_nothing_imports_the_old_path_of_the_contracts(module):
    old = {i for i in imports_of(MODULES[module]) if within(i, "simulator.contracts")}
    assert not old, f"{module} imports {sorted(old)}: import contracts, cli or simulator.model"


def test_the_crossings_are_still_there():
    """An exception that no import needs any more is struck from ``CROSSINGS``."""
    stale = [(a, b) for a, b in CROSSINGS
             if not any(within(m, a) and any(within(i, b) for i in GRAPH[m]) for m in GRAPH)]
    assert not stale, f"no module crosses {stale} any more: remove it from CROSSINGS"


def test_no_import_cycles():
    """Tarjan's strongly connected components over module imports: all of size one."""
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))
    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import circles: {cycles}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_says_what_it_holds_and_may_import(module):
    doc = ast.get_docstring(ast.parse(MODULES[module].read_text())) or ""
    assert doc and "Imports:" in doc, f"{module}: no docstring with an 'Imports:' sentence"


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_an_old_path_runs_its_pipeline_named_as_typed(alias, monkeypatch, capsys):
    """``python -m simulator.validate`` runs ``pipelines.validate`` (here: its --help and a
    flag it refuses, nothing run), whose usage and error lines name the program typed."""
    import runpy
    import sys

    def run(*argv):
        monkeypatch.setattr(sys, "argv", [alias, *argv])
        monkeypatch.delitem(sys.modules, ALIASES[alias], raising=False)  # as a fresh program
        with pytest.raises(SystemExit) as e:
            runpy.run_module(alias, run_name="__main__", alter_sys=True)
        return e.value.code, capsys.readouterr()

    code, said = run("--help")
    assert code == 0 and said.out.startswith(f"usage: python -m {alias} ")
    code, said = run("--no-such-flag")
    assert code == 2 and said.err.splitlines()[-1].startswith(
        f"python -m {alias}: error: unrecognized arguments: --no-such-flag")
    assert ALIASES[alias] not in said.err


def test_the_old_path_of_the_contracts_is_the_moved_module():
    """``simulator.contracts.X`` (kept for a release) is the moved module itself, not a copy."""
    import importlib
    import warnings

    import cli
    import contracts.profile
    from simulator.model.comm import closed_forms
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = {name: importlib.import_module(f"simulator.contracts.{name}")
               for name in ("profile", "cli", "closed_forms")}
        from simulator.contracts import workload
    assert old == {"profile": contracts.profile, "cli": cli, "closed_forms": closed_forms}
    assert workload.Workload is importlib.import_module("contracts.workload").Workload


def mains(path: Path) -> list[ast.FunctionDef]:
    return [n for n in ast.parse(path.read_text()).body
            if isinstance(n, ast.FunctionDef) and n.name == "main"]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if mains(MODULES[m])))
def test_every_main_is_a_few_lines_over_the_one_preamble(module):
    """A command's ``main`` hands its parser and its work to ``cli.command``: one-line
    usage errors with exit code 2, file-system errors with 1, never a traceback."""
    (main,) = mains(MODULES[module])
    calls = {c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
             for c in ast.walk(main) if isinstance(c, ast.Call)}
    assert "command" in calls, f"{module}.main does not call cli.command"
    assert main.end_lineno - main.lineno < 8, f"{module}.main is more than a few lines"
