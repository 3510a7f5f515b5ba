"""DeepLearningExamples' other PyTorch tables (``benchmarks.dle.published``): the same
servers by release, the ceiling carried from one release to the next, and ResNet-50's
siblings, whose losses rule out the loader's CPU and a cost a tensor; pinned."""
from __future__ import annotations

import pytest

from benchmarks.dle import check, published


def test_the_latest_release_is_the_checks_tables():
    later = [r for r in published.releases() if r.container == "pytorch-21.03"]
    pytorch = [t for t in check.TABLES if t.framework == "PyTorch"]
    assert [(r.precision, r.throughput) for r in later] == \
        [(t.precision, t.throughput) for t in pytorch]


def test_only_mixed_precision_behind_the_dataloader_scales_badly():
    """DALI: every point 96.8% or more; PyTorch's DataLoader: FP32 / TF32 96% or more,
    mixed precision 87.1% at most."""
    for r in published.releases():
        e = published.efficiency(r)
        if r.loader == published.DALI or r.precision != "amp":
            assert e >= 0.96, r
        else:
            assert e <= 0.872, r


def test_the_previous_releases_ceiling_is_pessimistic():
    """20.12's eight-GPU rate as 21.03's ceiling: -3.3 / -7.4 / -7.4 points."""
    rs = published.releases()
    got = []
    for system in ("DGX A100", "DGX-1 16GB", "DGX-1 32GB"):
        before, after = (next(r for r in rs if (r.container, r.system, r.precision)
                              == (c, system, "amp"))
                         for c in ("pytorch-20.12", "pytorch-21.03"))
        got.append(100 * (published.carried(before, after) - published.efficiency(after)))
    assert got == pytest.approx([-3.3, -7.4, -7.4], abs=0.05)
    assert "| DGX-1 16GB | 86.7% | 79.2% | -7.4 |" in published.markdown()


def test_siblings_lose_a_cost_a_step_of_the_server_not_of_images_or_tensors():
    """ResNet-50 and its two siblings (same loader, container, servers): what mixed
    precision loses at eight GPUs beyond FP32 / TF32 is 9.2-9.9 ms a step on the DGX A100
    and 17.3-24.1 ms on the DGX-1 whatever the model, while the images a second differ
    up to 5.7 times; ResNeXt at 4,065 images a second on a DGX-1 loses as much as
    ResNet-50 at 8,322 through the same loader."""
    ps = published.points()
    beyond = {}
    for model, system in dict.fromkeys((p.model, p.system) for p in ps):
        amp, other = (next(p for p in ps if (p.model, p.system) == (model, system)
                           and (p.precision == "amp") == want) for want in (True, False))
        beyond[model, system] = 1e3 * (published.lost_s(amp) - published.lost_s(other))
    a100 = [v for (m, s), v in beyond.items() if s == "DGX A100"]
    dgx1 = [v for (m, s), v in beyond.items() if s != "DGX A100"]
    assert len(a100) == 3 and len(dgx1) == 6
    assert 9.1 < min(a100) and max(a100) < 10.0 and 17.2 < min(dgx1) and max(dgx1) < 24.2
    rate = {(p.model, p.system): p.throughput[8] for p in ps if p.precision == "amp"}
    assert rate["resnet50", "DGX-1 16GB"] / rate["resnext101-32x4d", "DGX-1 16GB"] > 2
    lost = {(p.model, p.system): published.lost_s(p) for p in ps if p.precision == "amp"}
    assert lost["resnext101-32x4d", "DGX-1 16GB"] >= lost["resnet50", "DGX-1 16GB"]


def test_the_modelled_update_grows_with_the_tensors_the_tables_do_not():
    """The check's update (calls one by one after found_inf.item()) beyond one GPU: 707,
    1,370 and 2,030 calls, 4.8 / 9.3 / 13.7 ms; SE-ResNeXt's loss beyond TF32 on the DGX
    A100 (9.2 ms) is under its modelled update alone."""
    calls = [published.update_calls(m) for m in
             ("resnet50", "resnext101-32x4d", "se-resnext101-32x4d")]
    assert calls == [707, 1370, 2030]
    se = [p for p in published.points()
          if (p.model, p.system) == ("se-resnext101-32x4d", "DGX A100")]
    amp, tf32 = sorted(se, key=lambda p: p.precision != "amp")
    beyond = published.lost_s(amp) - published.lost_s(tf32)
    modelled = published.modelled_update_beyond_s("se-resnext101-32x4d", "DGX A100")
    assert modelled == pytest.approx(2030 * 7.74e-6 * 7 / 8, rel=1e-3)
    assert beyond < modelled - 4e-3


def test_the_models_parameters_from_their_source():
    """ResNet-50's 25,557,032 (torchvision's count); ResNeXt101-32x4d 44,177,704; the
    example's SE-ResNeXt squeezes through 16 channels: 45,251,128."""
    assert [published.parameters(m) for m in published.ARCH] == [25_557_032, 44_177_704,
                                                                 45_251_128]


def test_mxnet_dgx2_points_moved_between_releases_but_mixed_precision_at_16():
    """The same MXNet benchmark on the same DGX-2 and batch: mxnet-20.12's points 1.4-2.1
    points under mxnet-19.07's at 2-16 GPUs, but mixed precision at 16 GPUs (89.2% and
    90.0%) in both."""
    rows = [line.split(" | ") for line in published.mxnet_lines()[2:]]
    moved = {(r[0].strip("| "), r[1], int(r[2])): float(r[5].strip(" |")) for r in rows}
    dgx2 = {k: v for k, v in moved.items() if k[0] == "DGX-2"}
    assert len(dgx2) == 8 and dgx2["DGX-2", "amp", 16] == 0.8
    assert all(-2.1 <= v <= -1.4 for k, v in dgx2.items() if k != ("DGX-2", "amp", 16))


def test_efficientnets_rule_out_the_update_on_the_dgx1_and_a_constant_on_the_dgx_a100():
    """EfficientNet through the same loop and servers: on the DGX-1 every model loses
    15.5-21.2 ms beyond FP32, B4 with the optimizer stepped once in 16 iterations at eight
    GPUs; B0's FP32 and mixed-precision steps are equally long at one GPU (97.7 / 98.4 ms)
    yet lose 11.9 and 33.1 ms; on the DGX A100 B0 loses 7.6 ms beyond TF32 and B4 0.7."""
    ps = published.EFFICIENTNETS
    beyond = {(m, s): 1e3 * (published.lost_s(a) - published.lost_s(o))
              for m, s in dict.fromkeys((p.model, p.system) for p in ps)
              for a, o in [published.pair(ps, m, s)]}
    dgx1 = [v for (m, s), v in beyond.items() if s == "DGX-1 16GB"]
    assert len(beyond) == 8 and 15.4 < min(dgx1) and max(dgx1) < 21.3
    b4 = published.pair(ps, "efficientnet-b4", "DGX-1 16GB")[0]
    assert [published.optimizer_period(b4, g) for g in (1, 8)] == [128, 16]
    amp, fp32 = published.pair(ps, "efficientnet-b0", "DGX-1 16GB")
    assert [round(1e3 * q.batch / q.throughput[1], 1) for q in (amp, fp32)] == [98.4, 97.7]
    assert [round(1e3 * published.lost_s(q), 1) for q in (amp, fp32)] == [33.1, 11.9]
    assert beyond["efficientnet-b0", "DGX A100"] == pytest.approx(7.6, abs=0.05)
    assert beyond["efficientnet-b4", "DGX A100"] == pytest.approx(0.7, abs=0.05)
    assert "| efficientnet-b4 | DGX-1 16GB |" in "\n".join(published.efficientnet_lines())
