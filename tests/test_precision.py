"""--precision fp32|tf32|amp: a workload's step in the arithmetic a user picks.

The step of each precision is the workload file's ([measured.precisions]); every time
of the file scales by the ratio of the two steps, the tensors stay as they are.
"""
import json

import pytest

from simulator import predict
from contracts.workload import (
    WorkloadError,
    at_precision,
    load_workload,
    save_workload,
)
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)

RESNET = """
[model]
name = "rn"
tensor_params = [2049000, 23454912]
[measured]
device = "A100 SXM4"
precision = "tf32"
batch_size = 256
samples_per_second = 938
[measured.precisions]
amp = { samples_per_second = 2470, source = "a table, 1 GPU, mixed precision" }
"""


@pytest.fixture
def workload_file(tmp_path):
    f = tmp_path / "rn.toml"
    f.write_text(RESNET)
    return f


def test_a_precision_scales_every_time_and_keeps_the_tensors(workload_file):
    w = load_workload(workload_file)
    amp = at_precision(w, "amp")
    k = (256 / 2470) / (256 / 938)
    assert amp.step_s == pytest.approx(256 / 2470)
    assert amp.backward_s == pytest.approx(w.backward_s * k)
    assert amp.grad_bytes == w.grad_bytes and amp.precision == "amp"
    assert at_precision(amp, "tf32").step_s == pytest.approx(w.step_s)      # and back
    assert at_precision(w, "tf32") is w


def test_precisions_survive_a_round_trip(workload_file, tmp_path):
    w = load_workload(workload_file)
    back = load_workload(save_workload(w, tmp_path / "again.toml"))
    assert back.precision == "tf32"
    assert at_precision(back, "amp").step_s == pytest.approx(256 / 2470)


def test_a_missing_precision_is_named(workload_file):
    with pytest.raises(WorkloadError, match="no step time in fp32.*tf32, amp"):
        at_precision(load_workload(workload_file), "fp32")


@pytest.mark.parametrize("change,named", [
    (('precision = "tf32"', 'precision = "fp8"'), "measured.precision"),
    (("amp = {", "tf32 = {"), "measured.precisions.tf32"),
    (("samples_per_second = 2470, ", ""), "measured.precisions.amp.step"),
])
def test_bad_precision_entries_name_the_field(tmp_path, change, named):
    f = tmp_path / "bad.toml"
    f.write_text(RESNET.replace(*change))
    with pytest.raises(WorkloadError, match=named.replace(".", r"\.")):
        load_workload(f)


def _predict(workload_file, tmp_path, *extra):
    out = tmp_path / "out"
    code = predict.main(["--workload", str(workload_file), "--preset", "dgx-a100",
                         "--schemes", "allreduce", "--workers", "1,8", "--iterations", "5",
                         "--no-plot", "--jobs", "1", "--out", str(out), *extra])
    assert code == 0
    return json.loads((out / "predictions.json").read_text())


def test_predict_runs_the_precision_asked_for_and_says_where_it_came_from(workload_file,
                                                                          tmp_path):
    tf32, amp = (_predict(workload_file, tmp_path, "--precision", p) for p in ("tf32", "amp"))

    def step(pred, p):
        return next(r["epoch_s"] for r in pred["predictions"] if r["workers"] == p)
    # (allreduce: at one rank its epoch is its steps; DDP's would add its calls' fixed time)
    assert step(amp, 1) / step(tf32, 1) == pytest.approx(938 / 2470, rel=1e-6)
    rows = [r for r in amp["meta"]["provenance"] if "step time" in r["quantity"]]
    assert "in amp" in rows[0]["value"] and "a table, 1 GPU" in rows[0]["origin"]


def test_precision_without_a_workload_or_its_step_is_refused(workload_file, capsys):
    refused(predict.main, ["--precision", "amp", "--workers", "2"], "--workload", capsys)
    refused(predict.main, ["--workload", workload_file, "--preset", "dgx-a100",
                           "--precision", "fp32", "--workers", "2"], "no step time in fp32",
            capsys)
