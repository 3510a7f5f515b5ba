"""Predict Horovod's published benchmark and set it against the published scaling efficiency.

    python -m benchmarks.horovod.check --out docs/horovod

The benchmark (Horovod's docs, benchmarks page; README versions of 2017-2018):
tf_cnn_benchmarks with ``--variable_update horovod``, batch 64 per GPU,
synthetic ImageNet data, on servers of 4 Pascal GPUs (PCIe) with one
RoCE-capable 25 Gbit/s NIC each, NCCL 2 rings. Scaling efficiency is images
per second on P GPUs over P times one GPU's.

Inputs, each with its source (nothing is fitted to the published efficiency):

* per-GPU throughput at batch 64 (``THROUGHPUT``) and the network's tensors in
  gradient-ready order with their FLOPs per layer (``benchmarks/horovod/*-cpu.toml``,
  written by ``python -m calibrate.workload`` from ``benchmarks/horovod/models.py``):
  together the workload files ``*-p100.toml`` this command writes (backward 2/3 of
  a step, split over the layers by their FLOPs);
* the cluster: preset ``pascal-pcie-25gbe`` (every number sourced in the file), NCCL's
  ring allreduce with the protocol rule of ``--protocol`` (default ``nccl-2.2``: the
  releases the published runs had, NCCL 2.0-2.2, ran LL only up to 16 KiB a call;
  ``nccl-2.3``: NCCL 2.3-2.4's per-rank rule; ``auto``: NCCL 2.5's tuner);
* Horovod 0.9-0.13 under TensorFlow 1.x: fusion threshold 64 MiB, cycle 5 ms, NCCL ring
  (no tree, no hierarchical allreduce then), fp32 gradients; the requests run ahead of the
  data (``--requests ahead``, the default: TensorFlow's GPU ops return once enqueued, so
  Horovod fuses by request and each fused buffer waits for its last tensor's data,
  ``simulator.model.schemes.fusion``); ``--requests on-data`` is the model before that
  mechanism (each gradient handed over when its data is ready).

Writes ``horovod.csv`` (predicted efficiency at 1 ... 512 GPUs and the published
points) and ``horovod.png``, and prints the table of published points with the time a step
the model lacks at each (``missing_s``: one GPU's step over the published efficiency less
the same over the predicted one).
"""
from __future__ import annotations

import sys
from dataclasses import replace
from itertools import accumulate
from pathlib import Path

import cli
from contracts.cluster import PROTOCOLS, load_preset
from contracts.files import atomic_write_text, save_figure
from contracts.profile import load_default
from contracts.workload import ModelWorkload, Workload, load_workload, save_workload
from simulator.describe import growing
from simulator.engine import simulate
from simulator.engine.machine import machine, scaled_cost
from simulator.model.config import SchemeConfig
from simulator.model.schemes import fusion
from simulator.model.workload import ready_tensors

HERE = Path(__file__).resolve().parent
README_2017_09 = ("Horovod README, 2017-09-05 (commit d54e3a88): 4 servers x 4 Pascal GPUs, "
                  "RoCE-capable 25 Gbit/s; baseline single-GPU images/sec at batch 64, and on "
                  "16 GPUs with 'RDMA Horovod (allreduce on GPU with NCCL)'")
# images per second of one GPU at batch 64 (the README's "baseline single-GPU")
THROUGHPUT = {"inception3": 134.4, "resnet101": 119.4, "vgg16": 130.9}
# published scaling efficiency (%) on RoCE 25 Gbit/s, by GPUs
PUBLISHED = {
    16: ({"inception3": 100 * 2022.6 / (16 * 134.4), "resnet101": 100 * 1746.2 / (16 * 119.4),
          "vgg16": 100 * 1787.4 / (16 * 130.9)}, README_2017_09),
    128: ({"inception3": 90.0, "resnet101": 90.0, "vgg16": 79.0},
          ("Horovod README, 2017-10-17 (commit 6bb6a2db): 32 servers x 4 Pascal GPUs, RoCE 25 "
           "Gbit/s: 90% for Inception V3 and ResNet-101, 79% for VGG-16")),
    512: ({"inception3": 90.0, "resnet101": 90.0, "vgg16": 68.0},
          ("Horovod docs, benchmarks page (2018-05, commit 8318a898): 128 servers x 4 Pascal "
           "GPUs, RoCE 25 Gbit/s: 90% for Inception V3 and ResNet-101, 68% for VGG-16")),
}
NAMES = {"inception3": "Inception V3", "resnet101": "ResNet-101", "vgg16": "VGG-16"}
BATCH = 64
FUSION_BYTES = 64 * 2**20          # HOROVOD_FUSION_THRESHOLD's default (operations.cc)
PRESET = "pascal-pcie-25gbe"
PROG = "python -m benchmarks.horovod.check"


def p100_workload(name: str) -> ModelWorkload:
    """The P100 workload: the CPU file's tensors and per-layer FLOPs, the published
    throughput, backward 2/3 of a step split by FLOPs."""
    cpu = load_workload(HERE / f"{name}-cpu.toml")
    layers = tuple(replace(layer, forward_s=0.0, backward_s=0.0) for layer in cpu.layers)
    step_s = BATCH / THROUGHPUT[name]
    return ModelWorkload(
        name=name, layers=layers, device="Tesla P100 PCIe", batch_size=BATCH, step_s=step_s,
        backward_s=step_s * 2 / 3, forward_s=step_s / 3, flops_per_sample=cpu.flops_per_sample,
        input_shape=cpu.input_shape,
        provenance={"source": "numbers",
                    "throughput": f"{THROUGHPUT[name]} images/sec at batch {BATCH}: "
                                  + README_2017_09,
                    "tensors": f"benchmarks/horovod/{name}-cpu.toml (python -m calibrate.workload)",
                    "backward": "2/3 of a step (backward FLOPs twice the forward's), split over "
                                "the layers by their FLOPs",
                    "command": "python -m benchmarks.horovod.check"})


def efficiency(name: str, workload: ModelWorkload, counts: list[int], cfg: SchemeConfig,
               preset: str = PRESET, protocol: str = "auto",
               plateau: float | None = None) -> dict[int, float]:
    """Predicted scaling efficiency (%) at each GPU count: time per step at 1 GPU over
    time per step at P (every GPU takes BATCH images per step); NCCL's ring runs
    ``protocol`` (``contracts.cluster.PROTOCOLS``); ``plateau``: NCCL 2.7.3's ring plateau
    (from 4 KiB a rank) instead of the preset's (NCCL 2.5.6's constants: none)."""
    base = load_preset(preset)
    hw = replace(base.hardware, protocol=protocol)
    if plateau is not None:
        hw = replace(hw, ring_plateau=plateau, ring_plateau_bytes=4096.0)
    cluster = growing(replace(base, hardware=hw))
    mach = machine(load_default(), "embedded", cluster.at(1), [(workload, name)])
    work = Workload(model=name, batch_per_worker=BATCH, iterations=20)
    times = {p: simulate(cfg, p, work, cluster.at(p), mach.profile).time_s
             for p in sorted(set(counts) | {1})}
    return {p: 100 * times[1] / times[p] for p in counts}


def missing_s(name: str, published_pct: float, predicted_pct: float) -> float:
    """The time a step the model lacks at a published point: one GPU's step (the model's
    and the published runs' own, ``BATCH / THROUGHPUT``) over the published efficiency,
    less the same over the predicted one."""
    step_s = BATCH / THROUGHPUT[name]
    return step_s * (100 / published_pct - 100 / predicted_pct)


def first_buffer(name: str, threshold: int = FUSION_BYTES) -> tuple[float, int]:
    """When the first fused buffer's data is complete, in seconds after a step starts, and
    how many gradient tensors a step requests. The forward takes 1/3 of the step and the
    backward makes the tensors in ready order (``workload.ready_tensors``: each tensor of a
    layer with its layer); the first buffer (``fusion.last_tensors``) is ready with its last
    tensor. Until then Horovod's loop has time to hear every rank's requests and answer: its
    5 ms sleep, rank 0's counting of (P - 1) x tensors requests (``BackgroundThreadLoop``)
    and the first response cost the step nothing."""
    w = p100_workload(name)
    cost, _ = scaled_cost(w, growing(load_preset(PRESET)).at(1))
    tensors = ready_tensors(cost, cost.bytes_per_param)
    cum = list(accumulate(share for _, share in tensors))
    (_, last), *_ = fusion.last_tensors([b for b, _ in tensors], threshold)
    return w.forward_s + w.backward_s * cum[last], len(tensors)


def slack_table() -> str:
    """The time before the first fused buffer's data at each published point, and the most
    rank 0 could spend a request without delaying it (an upper bound: the host's own
    enqueueing of the step comes out of it too)."""
    head = " | ".join(f"a request, {p} GPUs" for p in PUBLISHED)
    lines = [f"| model | tensors a step | first buffer's data | {head} |",
             "|---|---:|---:|" + "---:|" * len(PUBLISHED)]
    for name in THROUGHPUT:
        ready_s, n = first_buffer(name)
        lines.append(f"| {NAMES[name]} | {n} | {ready_s * 1e3:.0f} ms | " + " | ".join(
            f"{ready_s / ((p - 1) * n) * 1e6:.1f} us" for p in PUBLISHED) + " |")
    return "\n".join(lines)


def table(results: dict[str, dict[int, float]]) -> str:
    lines = ["| GPUs | model | published | predicted | predicted - published | "
             "missing a step |", "|---:|---|---:|---:|---:|---:|"]
    for p, (values, _source) in PUBLISHED.items():
        for name, pub in values.items():
            pred = results[name][p]
            lines.append(f"| {p} | {NAMES[name]} | {pub:.1f}% | {pred:.1f}% | "
                         f"{pred - pub:+.1f} | {missing_s(name, pub, pred) * 1e3:.0f} ms |")
    return "\n".join(lines)


def figure(results: dict[str, dict[int, float]], path: Path) -> Path:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for (name, eff), color in zip(results.items(), ("C0", "C1", "C2")):
        ps = sorted(eff)
        ax.plot(ps, [eff[p] for p in ps], "-", color=color, label=f"{NAMES[name]} predicted")
        pub = [(p, v[0][name]) for p, v in PUBLISHED.items()]
        ax.plot([p for p, _ in pub], [e for _, e in pub], "o", color=color, mfc="none",
                label=f"{NAMES[name]} published")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs (4 per server, 25 Gbit/s RoCE)")
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    ax.set_title("Horovod benchmark: predicted (python -m benchmarks.horovod.check) "
                 "vs published", fontsize=8)
    import matplotlib
    matplotlib.use("Agg")
    return save_figure(fig, path)


def sensitivity(costs_us: list[float], protocol: str, ahead: bool) -> str:
    """Predicted efficiency at the published points when rank 0's negotiation costs
    ``costs_us`` per other rank and cycle (Horovod's coordination, not in the main table)."""
    return points_table("negotiation per rank",
                        [(f"{us:g} us", us, protocol) for us in costs_us], ahead)


def protocols_table(protocols: list[str], ahead: bool) -> str:
    """Predicted efficiency at the published points under other protocol rules."""
    return points_table("protocol", [(name, 0.0, name) for name in protocols], ahead)


def scheme(ahead: bool, negotiation_s: float = 0.0) -> SchemeConfig:
    """Horovod over NCCL rings, requests ahead of the data or not."""
    return SchemeConfig("horovod", backend="nccl", algorithm="ring", negotiation_s=negotiation_s,
                        requests_ahead=ahead)


def points_table(what: str, rows: list[tuple[str, float, str]], ahead: bool) -> str:
    """One row per (label, negotiation us per rank, protocol): efficiency at every
    published point, under the published row."""
    lines = [f"| {what} | " + " | ".join(
        f"{NAMES[n]} {p}" for p in PUBLISHED for n in THROUGHPUT) + " |",
        "|---:|" + "---:|" * (len(PUBLISHED) * len(THROUGHPUT))]
    published = " | ".join(f"{PUBLISHED[p][0][n]:.1f}" for p in PUBLISHED for n in THROUGHPUT)
    lines.append(f"| published | {published} |")
    for label, us, protocol in rows:
        cfg = scheme(ahead, negotiation_s=us * 1e-6)
        eff = {n: efficiency(n, p100_workload(n), list(PUBLISHED), cfg, protocol=protocol)
               for n in THROUGHPUT}
        lines.append(f"| {label} | " + " | ".join(f"{eff[n][p]:.1f}" for p in PUBLISHED
                                                   for n in THROUGHPUT) + " |")
    return "\n".join(lines)


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/horovod", help="folder for horovod.csv and .png")
    ap.add_argument("--negotiation-us", default="",
                    help="also print the published points predicted with these costs of "
                         "Horovod's negotiation per rank and cycle, e.g. 0,2,5,10")
    ap.add_argument("--protocol", choices=PROTOCOLS, default="nccl-2.2",
                    help="NCCL's protocol for the ring allreduces: the rule of the releases "
                         "the published runs had (nccl-2.2, the default: LL up to 16 KiB a "
                         "call, as in NCCL 2.1-2.2; 2.0 had no LL), NCCL 2.3-2.4's (nccl-2.3: "
                         "up to 16 KiB per rank and ring here), the faster of LL and Simple "
                         "by NCCL 2.5's tuner (auto), or one of them")
    ap.add_argument("--protocols", default="",
                    help="also print the published points predicted under these protocol "
                         "rules, e.g. nccl-2.3,auto")
    ap.add_argument("--requests", choices=("ahead", "on-data"), default="ahead",
                    help="when TensorFlow hands a gradient to Horovod: ahead of its data "
                         "(the default: its GPU ops return once enqueued; fused by request, "
                         "each buffer waits for its data) or once its data is ready (the "
                         "model without that mechanism)")
    ap.add_argument("--ring-plateau", type=float, default=None,
                    help="NCCL's 'plateau effect of ring' for the multi-node Simple rings, e.g. "
                         "1.9 (NCCL 2.7.3 on for Pascal and Volta, from 4 KiB a rank); default: "
                         "the preset's (NCCL 2.5.6's constants have none)")
    return ap


def parse(argv=None):
    """The flags, and what they must say together (an argparse error: exit code 2)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.ring_plateau is not None and args.ring_plateau < 1:
        ap.error("--ring-plateau must be at least 1")
    unknown = [x for x in args.protocols.split(",") if x and x not in PROTOCOLS]
    if unknown:
        ap.error(f"--protocols: unknown rule {unknown[0]!r} (choose from {', '.join(PROTOCOLS)})")
    return args


def run(args) -> int:
    counts = [2 ** k for k in range(10)]
    ahead = args.requests == "ahead"
    cfg = scheme(ahead)
    results = {}
    for name in THROUGHPUT:
        w = p100_workload(name)
        save_workload(w, HERE / f"{name}-p100.toml",
                      comment=f"{NAMES[name]} on a Tesla P100 PCIe, made by "
                              "python -m benchmarks.horovod.check")
        results[name] = efficiency(name, w, counts, cfg, protocol=args.protocol,
                                   plateau=args.ring_plateau)
    out = Path(args.out)
    rows = ["gpus,model,predicted_efficiency_pct,published_efficiency_pct"]
    for name, eff in results.items():
        for p in counts:
            pub = PUBLISHED.get(p, ({}, ""))[0].get(name)
            rows.append(f"{p},{name},{eff[p]:.2f},{'' if pub is None else f'{pub:.2f}'}")
    atomic_write_text(out / "horovod.csv", "\n".join(rows) + "\n")
    figure(results, out / "horovod.png")
    print(table(results))
    print()
    print(slack_table())
    if args.negotiation_us:
        print()
        print(sensitivity([float(x) for x in args.negotiation_us.split(",")], args.protocol,
                          ahead))
    if args.protocols:
        print()
        print(protocols_table(args.protocols.split(","), ahead))
    print(f"\nwrote {out / 'horovod.csv'}, {out / 'horovod.png'}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, parse, run, argv)


if __name__ == "__main__":
    sys.exit(main())
