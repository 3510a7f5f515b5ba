"""A workload file a phantom run can sleep: ResNet-50 at one GPU's published step time.

    python -m benchmarks.dle.phantom_workload --out resnet50-v100.toml

A phantom run sleeps each layer's forward and backward time, so its workload file must
give them per layer. NVIDIA publishes one GPU's throughput, not its layers: the step is
the published one (``--table``, one of ``benchmarks.dle.check.TABLES``: by default
ResNet-50 v1.5, PyTorch, one V100 16GB of a DGX-1 in FP32 at batch 256, 367 images/s,
so 0.698 s a step), and it is split over ResNet-50's layers, forward, backward and the
update, in the shares this machine's CPU measured for them
(``benchmarks/dle/resnet50-cpu.toml``, ``python -m calibrate.workload``): every time of
that file times one factor. The tensors, their order and the FLOPs are that file's. The
shares are the CPU's at batch 2, not the GPU's at batch 256 (unpublished): the order in
which gradients become ready, which DDP's buckets and the overlap follow, is the model's
either way.

A phantom run of it at ``--time-scale S`` sleeps S times the published step:
``real.train --compute phantom --workload resnet50-v100.toml --time-scale 20 --batch-size
256``.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import cli
from contracts.workload import load_workload, save_workload, slept_update_s

from .check import TABLES

PROG = "python -m benchmarks.dle.phantom_workload"

HERE = Path(__file__).resolve().parent


def table_named(name: str):
    """The table ``framework/system/precision`` (e.g. ``PyTorch/DGX-1 16GB/fp32``)."""
    for t in TABLES:
        if f"{t.framework}/{t.system}/{t.precision}" == name:
            return t
    names = ", ".join(f"{t.framework}/{t.system}/{t.precision}" for t in TABLES)
    raise SystemExit(f"--table {name!r}: not one of {names}")


def gpu_workload(table, cpu_file: Path = HERE / "resnet50-cpu.toml"):
    """The CPU file's layers, their times scaled so that they add up to the table's step."""
    cpu = load_workload(cpu_file)
    step_s = table.batch / table.throughput[1]
    cpu_step = sum(lay.forward_s + lay.backward_s for lay in cpu.layers) + slept_update_s(cpu)
    k = step_s / cpu_step
    layers = tuple(replace(lay, forward_s=lay.forward_s * k, backward_s=lay.backward_s * k)
                   for lay in cpu.layers)
    return replace(
        cpu, layers=layers, device=table.device, batch_size=table.batch, step_s=step_s,
        forward_s=cpu.forward_s * k, backward_s=cpu.backward_s * k,
        update_s=slept_update_s(cpu) * k, spread_cv=0.0, lines=(), precision=table.precision,
        provenance={"source": "numbers",
                    "throughput": f"{table.throughput[1]} images/s on one GPU at batch "
                                  f"{table.batch}: {table.source}",
                    "layers": f"the shares of {cpu_file.name} (python -m calibrate.workload "
                              "on this machine's CPU, batch 2), scaled to the published step",
                    "command": "python -m benchmarks.dle.phantom_workload"})


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--table", default="PyTorch/DGX-1 16GB/fp32",
                   help="framework/system/precision of benchmarks.dle.check's tables")
    p.add_argument("--out", required=True, type=Path)
    return p


def run(args) -> int:
    t = table_named(args.table)
    w = gpu_workload(t)
    save_workload(w, args.out, comment=f"ResNet-50 at {t.device}'s published step "
                                       f"(python -m benchmarks.dle.phantom_workload)")
    print(f"wrote {args.out}: {w.step_s:.3f} s a step of {w.batch_size} on {w.device} "
          f"({w.precision}), {len(w.layers)} layers, {w.grad_bytes / 1e6:.1f} MB of gradients")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
