"""Predict a published multi-node result: Transformer-XL large on 1 to 8 NVIDIA DGX-2H.

    python -m benchmarks.dle.multinode --out docs/dle

The result (NVIDIA DeepLearningExamples, PyTorch/LanguageModeling/Transformer-XL/README.md,
commit of the stored copy, "Training performance: 8x NVIDIA DGX-2H (16x V100 32GB)", large
model, pytorch-20.06-py3 NGC container): tokens per second on 1, 2, 4 and 8 DGX-2H (16 V100
32GB each on NVSwitch; 8 x 100 Gbit/s InfiniBand per node, preset ``dgx2``), 4 sequences of
384 tokens per GPU, FP32 and mixed precision (Apex AMP O2: fp16 weights, so DDP moves fp16
gradients), and the weak scaling against one node.

Inputs, each from the README: the large model's shape (18 layers, d_model 1024, 16 heads of
64, d_inner 4096, tgt_len 384; adaptive softmax over WikiText-103's 267,735 words with
cutoffs 19,997 / 39,997 / 199,997 and div_val 4, embeddings tied to the classifier), which
gives its tensors (``tensors``); one node's published throughput per GPU as the step (what
the node loses inside is in it; the check predicts what crossing nodes adds); DDP with
25 MiB buckets over NCCL, the embeddings' gradients ready last (tied weights are used at
both ends of the network); the step carries DDP's own calls (the node ran DDP), so the
preset's ``ddp_buffer`` and ``ddp_gradient`` are not added again. Nothing is fitted to the
published scaling. Each point is predicted twice (``ALGORITHMS``): with NCCL's flat ring, whose channels cross nodes
through the node's 8 NICs at once, one ring per NIC (``model.fabric``), and with the
hierarchical allreduce, whose cross-node rings use every NIC too.
"""
from __future__ import annotations

import sys
from pathlib import Path

import cli
from contracts.cluster import load_preset
from contracts.files import atomic_write_text
from contracts.profile import load_default
from contracts.workload import Layer, ModelWorkload, Tensor, Workload
from simulator.describe import growing
from simulator.engine import steady_iteration_s
from simulator.engine.machine import machine
from simulator.model.config import SchemeConfig

PROG = "python -m benchmarks.dle.multinode"

SOURCE = ("NVIDIA DeepLearningExamples, PyTorch/LanguageModeling/Transformer-XL/README.md, "
          "'Training performance: 8x NVIDIA DGX-2H (16x V100 32GB)', large model, "
          "LOCAL_BATCH_SIZE=4, pytorch-20.06-py3 NGC container")
# nodes -> tokens per second, FP32 and mixed precision
PUBLISHED = {"fp32": {1: 69_070, 2: 136_960, 4: 270_120, 8: 514_500},
             "amp": {1: 154_950, 2: 307_520, 4: 605_530, 8: 1_189_700}}
GPUS_PER_NODE, BATCH, TGT_LEN = 16, 4, 384
N_LAYER, D_MODEL, N_HEAD, D_HEAD, D_INNER = 18, 1024, 16, 64, 4096
CUTOFFS, VOCAB, DIV_VAL = (19_997, 39_997, 199_997), 267_735, 4
ITERATIONS = 10
# NCCL's flat ring (its channels over every NIC of a node, one ring per NIC) and the
# hierarchical allreduce, whose cross-host rings use every NIC of a node at once
ALGORITHMS = ("ring", "hierarchical")


def tensors() -> tuple[Layer, ...]:
    """The large model's parameters in gradient-ready order: the 18 layers from the last
    (attention without biases, a two-layer feed-forward with biases, two layer norms),
    then the tied adaptive embedding and softmax with the shared attention biases."""
    hd = N_HEAD * D_HEAD
    layer = (("qkv", D_MODEL * 3 * hd), ("o", hd * D_MODEL), ("r", D_MODEL * hd),
             ("ln1", 2 * D_MODEL), ("ff1", D_MODEL * D_INNER + D_INNER),
             ("ff2", D_INNER * D_MODEL + D_MODEL), ("ln2", 2 * D_MODEL))
    layers = [Layer(f"layers.{i}", tuple(Tensor(f"layers.{i}.{n}", c) for n, c in layer))
              for i in reversed(range(N_LAYER))]
    bounds = (0, *CUTOFFS, VOCAB)
    emb = []
    for k in range(len(bounds) - 1):
        d = D_MODEL // DIV_VAL ** k
        emb.append(Tensor(f"emb.{k}", (bounds[k + 1] - bounds[k]) * d))
        emb.append(Tensor(f"emb.proj.{k}", d * D_MODEL))
    emb += [Tensor("cluster", len(CUTOFFS) * (D_MODEL + 1)), Tensor("r_w_bias", hd),
            Tensor("r_r_bias", hd)]
    return (*layers, Layer("embedding", tuple(emb)))


def workload(precision: str) -> ModelWorkload:
    per_gpu = PUBLISHED[precision][1] / GPUS_PER_NODE
    step_s = BATCH * TGT_LEN / per_gpu
    dtype = "float16" if precision == "amp" else "float32"
    layers = tuple(Layer(l.name, tuple(Tensor(t.name, t.params, dtype) for t in l.tensors))
                   for l in tensors())
    return ModelWorkload(name="transformer-xl-large", layers=layers, device="Tesla V100 SXM2",
                         batch_size=BATCH, step_s=step_s, backward_s=step_s * 2 / 3,
                         forward_s=step_s / 3, precision=precision,
                         provenance={"source": "numbers", "throughput": SOURCE})


def rows(algorithm: str = "ring") -> list[dict]:
    out = []
    # the step is one node's published rate, run under DDP: DDP's calls are in it already
    cluster = growing(load_preset("dgx2").without_ddp_calls())
    for precision, table in PUBLISHED.items():
        w = workload(precision)
        mach = machine(load_default(), "embedded", cluster.at(1), [(w, "txl")])
        work = Workload(model=w.name, batch_per_worker=BATCH, iterations=ITERATIONS)
        cfg = SchemeConfig("ddp", backend="nccl", algorithm=algorithm)
        t = {n: steady_iteration_s(cfg, n * GPUS_PER_NODE, work, cluster.at(n * GPUS_PER_NODE),
                                   mach.profile) for n in table}
        for n, tokens in table.items():
            if n == 1:
                continue
            out.append({"algorithm": algorithm, "precision": precision, "nodes": n, "gpus": n * GPUS_PER_NODE,
                        "published": 100 * tokens / (n * table[1]),
                        "predicted": 100 * t[1] / t[n],
                        "iteration_s": BATCH * TGT_LEN * n * GPUS_PER_NODE / tokens,
                        "predicted_iteration_s": t[n]})
    return out


def markdown(points: list[dict]) -> str:
    lines = ["| allreduce | precision | DGX-2H | GPUs | published (vs 1 node) | predicted | "
             "difference (points) | time per iteration published | predicted | error |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in points:
        err = r["predicted_iteration_s"] / r["iteration_s"] - 1
        lines.append(f"| {r['algorithm']} | {r['precision']} | {r['nodes']} | {r['gpus']} | {r['published']:.1f}% "
                     f"| {r['predicted']:.1f}% | {r['predicted'] - r['published']:+.1f} | "
                     f"{r['iteration_s'] * 1e3:.1f} ms | {r['predicted_iteration_s'] * 1e3:.1f} ms"
                     f" | {err:+.1%} |")
    return "\n".join(lines)


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/dle", help="folder for multinode.md")
    return ap


def run(args) -> int:
    text = markdown([r for a in ALGORITHMS for r in rows(a)])
    atomic_write_text(Path(args.out) / "multinode.md", text + "\n")
    print(text)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
