"""The workload ``benchmarks.dle.check`` predicts, as a file ``simulator.predict`` reads.

    python -m benchmarks.dle.workload_file --out benchmarks/dle/resnet50-a100.toml

ResNet-50 v1.5 on one GPU of a DeepLearningExamples PyTorch table (``--system``, by default
the DGX A100 80GB): the check's workload (``check.workload``: the tensors, buffers and
FLOPs of ``resnet50-cpu.toml``, the published one-GPU rate as the step, the input pipeline's
measured curve and loader workers) in the first precision the system's tables give, and each
other precision at the same batch as a ``[measured.precisions]`` entry. The published one-GPU
runs step the optimizer in 12 of their 100 iterations; a workload file's step holds one
update, so each step is the check's step without it plus the example's update
(``check.update_s``). With it, ``simulator.predict --preset dgx-a100 --workload
resnet50-a100.toml --precision amp`` applies the mechanisms the check applies, and its
eight-GPU iteration is the check's (``--accumulation-steps`` 1, as the eight-GPU runs).
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import cli
from contracts.checks import ConfigError
from contracts.workload import save_workload

from .check import TABLES, update_s, workload

PROG = "python -m benchmarks.dle.workload_file"


def tables_of(system: str) -> list:
    """The PyTorch tables of ``system``, the first's batch for all (others left out)."""
    tables = [t for t in TABLES if t.framework == "PyTorch" and t.system == system]
    if not tables:
        names = sorted({t.system for t in TABLES if t.framework == "PyTorch"})
        raise ConfigError(f"--system {system!r}: not one of {', '.join(names)}")
    return [t for t in tables if t.batch == tables[0].batch]


def step_with_update_s(t) -> float:
    """The table's one-GPU step as a workload file states a step, with one update: the
    check's step without it (``check.workload``) and the example's update (``update_s``)."""
    return workload(t).step_s + update_s(t)


def file_workload(system: str):
    """The check's workload of the system's first table, the others as precisions, each
    step with one update (the update's time not given: its size is the model's)."""
    first, *others = tables_of(system)
    w = workload(first)
    u = update_s(first)
    steps = tuple((t.precision, step_with_update_s(t),
                   f"{t.throughput[1]} images/s on one GPU at batch {t.batch}, a step with "
                   f"one update: {t.source}") for t in others)
    return replace(w, step_s=w.step_s + u, forward_s=w.forward_s + u, precision_steps=steps,
                   provenance=dict(w.provenance, command=PROG, update=(
                       "the published one-GPU runs update in 12 of 100 iterations: the step "
                       "without it (benchmarks.dle.check.step_without_update_s) plus one "
                       "update of the example's SGD (benchmarks.dle.check.update_s)")))


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--system", default="DGX A100 80GB",
                   help="a system of the PyTorch tables (default: DGX A100 80GB)")
    p.add_argument("--out", required=True, type=Path, help="the workload file to write")
    return p


def run(args) -> int:
    w = file_workload(args.system)
    save_workload(w, args.out, comment=f"ResNet-50 v1.5 at one {w.device}'s published steps "
                                       f"({PROG})")
    print(f"wrote {args.out}: {w.step_s * 1e3:.1f} ms a step of {w.batch_size} on {w.device} "
          f"({w.precision}; also {', '.join(p for p, _, _ in w.precision_steps) or 'none'})")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
