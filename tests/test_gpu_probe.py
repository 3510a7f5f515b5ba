"""The GPU probes (benchmarks.gpu.interference_probe, step_probe) refuse a machine without
CUDA, and step_probe an unknown part, in one line."""
import pytest

from benchmarks.gpu import interference_probe, step_probe
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("probe, written", [(interference_probe, "interference.json"),
                                             (step_probe, "step_probe.json")])
def test_without_cuda_it_says_so(probe, written, capsys, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the probe would run")
    refused(probe.main, ["--out", tmp_path], "no CUDA device", capsys)
    assert not (tmp_path / written).exists()


def test_the_step_probe_refuses_an_unknown_part(capsys, tmp_path):
    refused(step_probe.main, ["--out", tmp_path, "--parts", "ddp,nvlink"], "unknown part 'nvlink'",
            capsys)
    assert not (tmp_path / "step_probe.json").exists()


def test_the_step_probe_splits_ddps_share_into_copies_and_the_rest():
    """DDP's defaults copy each gradient into its bucket and back; with bucket views they do
    not, so the difference of the two shares is the copies' part; without the buffers'
    broadcast, the difference is the buffers' part."""
    out = step_probe.shares({"plain": {"step_s": 0.100}, "ddp": {"step_s": 0.106},
                             "ddp_views": {"step_s": 0.104},
                             "ddp_no_buffers": {"step_s": 0.1045}})
    assert out["ddp_over_plain"] == pytest.approx(0.06)
    assert out["views_over_plain"] == pytest.approx(0.04)
    assert out["copies_over_plain"] == pytest.approx(0.02)
    assert out["ddp_added_s"] == pytest.approx(0.006)
    assert out["copies_back_s"] == pytest.approx(0.002)
    assert out["buffers_s"] == pytest.approx(0.0015)
    assert step_probe.VARIANTS == {"plain": None, "ddp": {},
                                   "ddp_views": {"gradient_as_bucket_view": True},
                                   "ddp_no_buffers": {"broadcast_buffers": False}}
    assert step_probe.PRECISIONS == ("fp32", "tf32", "amp")
