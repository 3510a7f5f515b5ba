"""The GPU probe (benchmarks.gpu.interference_probe) refuses a machine without CUDA in one line."""
import pytest

from benchmarks.gpu import interference_probe
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


def test_without_cuda_it_says_so(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the probe would run")
    refused(interference_probe.main, ["--out", tmp_path], "no CUDA device", capsys)
    assert not (tmp_path / "interference.json").exists()
