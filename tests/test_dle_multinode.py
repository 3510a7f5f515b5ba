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
    """Through one NIC per crossing (the model's channels share links): 1 to 11 points
    pessimistic; with every NIC at once (hierarchical): 5 of 6 within 3 points."""
    flat, spread = multinode.rows("ring"), multinode.rows("hierarchical")
    assert len(flat) == len(spread) == 6
    assert all(-12 < r["predicted"] - r["published"] < -1 for r in flat)
    assert sum(abs(r["predicted"] - r["published"]) <= 3 for r in spread) == 5
    assert multinode.main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / "multinode.md").read_text().count("\n| ") == 12
