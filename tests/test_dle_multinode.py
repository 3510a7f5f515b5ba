"""The multi-node check: Transformer-XL large on 1 to 8 DGX-2H (benchmarks.dle.multinode)."""
import pytest

from benchmarks.dle import multinode

pytestmark = pytest.mark.timeout(300)


def test_the_model_has_the_readmes_shape():
    layers = multinode.tensors()
    assert len(layers) == 19 and layers[-1].name == "embedding"      # tied weights: last
    assert layers[0].params == 13_640_704                            # one layer of 18
    assert sum(layer.params for layer in layers) == 283_851_171


def test_the_points_as_pinned(tmp_path):
    """NCCL's flat ring over every NIC of a node (one ring per NIC) and the hierarchical
    allreduce: 5 of 6 within 3 points each, the miss fp32 at 8 nodes, 4 to 7 points
    optimistic in both."""
    assert multinode.main(["--out", str(tmp_path)]) == 0       # both allreduces, once
    cells = [line.split(" | ") for line in (tmp_path / "multinode.md").read_text().splitlines()
             if line.startswith(("| ring", "| hierarchical"))]
    assert len(cells) == 12
    for algorithm in ("ring", "hierarchical"):
        rows = [c for c in cells if c[0] == f"| {algorithm}"]
        missed = [c for c in rows if abs(float(c[6])) > 3]     # difference (points)
        assert len(rows) == 6 and [(m[1], m[2]) for m in missed] == [("fp32", "8")]
        assert 4 < float(missed[0][6]) < 7
