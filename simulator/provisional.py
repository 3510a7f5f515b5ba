"""Write the PROVISIONAL default profile (``python -m simulator.provisional``).

A hand-made placeholder so that ``python -m simulator.predict`` works before
``python -m calibrate`` has measured this machine; ``calibrate`` replaces
``simulator/data/default_profile.json``. The numbers are plausible for a
2-core host: the seed-000 CNN takes ~23 ms per batch of 64 on 1 thread and
~10 ms on 2; an MPICH allreduce of 4 MiB between 2 ranks ~3 ms; gloo slower.
Parameter counts are those of ``real/training/models.py`` (1x28x28 input, 10 classes;
vgg11 for 3x32x32), one entry per parameter tensor (weights, then bias).

Imports: cli, contracts.profile.
"""
from __future__ import annotations

import sys
from pathlib import Path

import cli
from contracts.profile import (
    ModelCost,
    Profile,
    Provenance,
    ServerCost,
    StepFit,
    Transport,
    save,
)

_BN = lambda c: (c, c)  # noqa: E731  (BatchNorm weight and bias)


def _vgg11_layers() -> tuple[int, ...]:
    layers, cin = [], 3
    for cout in (64, 128, 256, 256, 512, 512, 512, 512):
        layers += [cin * cout * 9, cout, *_BN(cout)]
        cin = cout
    return tuple(layers + [512 * 10, 10])


# model -> (per-tensor parameter counts, (intercept_s, s_per_sample) at 1 and 2 threads, cv)
MODELS = {
    "cnn": ((250, 10, 5000, 20, 4000, 50, 500, 10), ((3e-3, 3.125e-4), (2e-3, 1.25e-4)), 0.08),
    "ps_cnn": ((288, 32, 18432, 64, 1179648, 128, 1280, 10),
               ((6e-3, 1.2e-3), (4e-3, 6.5e-4)), 0.06),
    "linear": ((7840, 10), ((2e-4, 6e-6), (2e-4, 5e-6)), 0.15),
    "mlp": ((100352, 128, 1280, 10), ((4e-4, 2.5e-5), (3e-4, 1.5e-5)), 0.12),
    "vgg11": (_vgg11_layers(), ((0.05, 2.4e-2), (0.04, 1.3e-2)), 0.04),
}


def provisional_profile() -> Profile:
    models = []
    for name, (layers, fits, cv) in MODELS.items():
        steps = tuple(StepFit(threads=t, step_intercept_s=a, step_s_per_sample=b, spread_cv=cv,
                              batches=(16, 32, 64, 128))
                      for t, (a, b) in zip((1, 2), fits))
        models.append(ModelCost(name, sum(layers), layers, steps, backward_fraction=0.6))
    return Profile(
        provenance=Provenance(
            host="provisional", cores=2, created_utc="2026-01-01T00:00:00Z",
            commands=("python -m simulator.provisional",),
            note="PROVISIONAL hand-made placeholder, to be replaced by python -m calibrate"),
        cores=2,
        models=tuple(models),
        transports=(Transport("mpi", alpha_s=5e-6, beta_s_per_byte=5e-10, gamma_s_per_byte=3e-10),
                    Transport("gloo", alpha_s=3e-5, beta_s_per_byte=8e-10, gamma_s_per_byte=3e-10)),
        sharing_slowdown={1: 1.0, 2: 1.08, 3: 1.62, 4: 2.16, 8: 4.3, 16: 8.6},
        server=ServerCost(update_intercept_s=5e-5, update_s_per_param=1e-9),
    )


PROG = "python -m simulator.provisional"
DEFAULT_OUT = Path(__file__).parent / "data" / "default_profile.json"


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description="Write the PROVISIONAL default profile: a hand-made "
                   "placeholder until python -m calibrate has measured this machine.")
    p.add_argument("out", nargs="?", default=str(DEFAULT_OUT), type=cli.output_file(".json"),
                   help="profile JSON to write (default: the profile predict reads, "
                        "simulator/data/default_profile.json)")
    return p


def run(args) -> int:
    save(provisional_profile(), Path(args.out))
    cli.print_out(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
