"""gloo's scatter out of the root's port: the pieces in turn (the model) or sharing it.

    python -m benchmarks.scatter_order docs/results/phantom-26 --out scatter-order.csv

The model sends the root's scatter out of its port one piece after another
(``simulator.model.comm.gloo.scatter``), the order TCP keeps where each connection's
congestion window holds its whole piece. Where a connection's window is below its piece,
it puts one window of the piece in the port's queue and waits a round trip, behind the
other connections' pieces, for the rest: the pieces interleave and finish together. On
the emulated cluster under CUBIC at 50 Mbit/s HyStart ends some of the root's connections'
slow start at its low window, 16 segments, against the CNN's 27-segment pieces (which of
them varies from run to run, and the windows outgrow a piece within about 12 steps;
docs/results/phantom.md, "What is left: P = 8 at 50 Mbit/s under CUBIC"). The limit of
that, every piece sharing the port from the start, bounds the runs from the other side. This predicts a phantom validation's gather_scatter points
again both ways (``benchmarks.repredict``'s prediction, then with the root's pieces sent
at once, sharing its port max-min fairly) and prints the measured epoch, both
predictions and their errors. It changes nothing in the model; a few seconds a folder.

Imports: pandas, cli, contracts.files, benchmarks.repredict, simulator.model.comm.gloo.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pandas as pd

import cli
from contracts.files import atomic_write_text

PROG = "python -m benchmarks.scatter_order"
KEY = ["folder", "model", "workers", "bandwidth_bits_per_s"]


def _together(p2p, src, dsts, n_bytes, tag):
    """Generator: ``src``'s messages to ``dsts`` all at once (they share its port)."""
    sent = [p2p.isend(src, dst, n_bytes, tag) for dst in dsts]
    for ev in sent:
        yield ev


@contextlib.contextmanager
def pieces_together():
    """The root's scatter sends its pieces at once while inside (``gloo._in_turn``)."""
    from simulator.model.comm import gloo
    in_turn, gloo._in_turn = gloo._in_turn, _together
    try:
        yield
    finally:
        gloo._in_turn = in_turn


def both_orders(folder: Path) -> pd.DataFrame:
    """A phantom folder's gather_scatter points: measured, in turn, together (seconds an
    epoch) and whether each is held out. ``ValueError`` as ``repredict_phantom``'s."""
    from benchmarks.repredict import repredict_phantom
    in_turn, _ = repredict_phantom(folder)
    with pieces_together():
        together, _ = repredict_phantom(folder)
    pick = lambda df: df[df["scheme"] == "gather_scatter"]     # noqa: E731
    rows = pick(in_turn)[KEY + ["held_out", "measured_s", "predicted_s"]].merge(
        pick(together)[KEY + ["predicted_s"]], on=KEY, suffixes=("_in_turn", "_together"))
    return rows.sort_values(["folder", "model", "bandwidth_bits_per_s", "workers"])


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", metavar="FOLDER",
                    help="phantom validation folders (docs/results/phantom-N)")
    ap.add_argument("--out", required=True, help="CSV of the points, both predictions")
    return ap


def run(a) -> int:
    frames = []
    for name in a.folders:
        folder = Path(name)
        if not (folder / "compare.csv").is_file() or not (folder / "link.toml").is_file():
            return cli.usage_error(PROG, f"{folder} is not a phantom validation folder "
                                         "(compare.csv, link.toml): give docs/results/phantom-N")
        try:
            frames.append(both_orders(folder))
        except ValueError as e:
            return cli.usage_error(PROG, str(e))
    df = pd.concat(frames, ignore_index=True)
    if df.empty:
        return cli.usage_error(PROG, "no gather_scatter point in " + ", ".join(a.folders))
    atomic_write_text(a.out, df.to_csv(index=False))
    for order in ("in_turn", "together"):
        df[f"error_{order}"] = df[f"predicted_s_{order}"] / df["measured_s"] - 1
    shown = df.assign(Mbit_s=df["bandwidth_bits_per_s"] / 1e6).drop(
        columns=["bandwidth_bits_per_s"])
    cli.print_out(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}",
                                  formatters={c: (lambda x: f"{100 * x:+.1f}%")
                                              for c in ("error_in_turn", "error_together")}))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
