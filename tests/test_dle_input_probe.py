"""The input probe (benchmarks.dle.input_probe): its crop follows torchvision 0.10's
RandomResizedCrop, its images are ImageNet's size and coding at the target bytes, the same
from the same seed, and bad levels are refused in one line. No timing is asserted."""
import io
import math
import random

import pytest

from benchmarks.dle import input_probe
from tests.refusal import refused

pytestmark = pytest.mark.timeout(60)


def test_the_crop_is_torchvisions_random_resized_crop():
    """An area of 8-100% of the image's and an aspect of 3/4-4/3, inside the image; where ten
    tries fail (an image far wider than 4/3), the centre crop at the largest allowed ratio."""
    rnd = random.Random(1)
    for _ in range(2000):
        top, left, h, w = input_probe.crop_params(469, 387, rnd)
        assert 0 <= top <= 387 - h and 0 <= left <= 469 - w
        assert 0.08 * 469 * 387 * 0.97 <= w * h <= 469 * 387
        assert 3 / 4 * 0.97 <= w / h <= 4 / 3 * 1.03
    assert input_probe.crop_params(1000, 10, rnd) == (0, (1000 - 13) // 2, 10, 13)
    assert input_probe.crop_params(10, 1000, rnd) == ((1000 - 13) // 2, 0, 13, 10)


def test_the_images_have_imagenets_size_coding_and_bytes_and_are_deterministic():
    Image = pytest.importorskip("PIL.Image")
    from PIL import JpegImagePlugin
    jpegs, contrast = input_probe.imagenet_like_jpegs(2, seed=3, target=60_000)
    assert abs(sum(map(len, jpegs)) / 2 / 60_000 - 1) <= 0.01 and contrast > 0
    assert input_probe.imagenet_like_jpegs(2, seed=3, target=60_000)[0] == jpegs
    img = Image.open(io.BytesIO(jpegs[0]))
    assert img.size == (469, 387) and img.mode == "RGB"
    assert JpegImagePlugin.get_sampling(img) == 0            # 4:4:4, no chroma subsampling


def test_a_worker_image_is_the_examples_crop_and_collate(tmp_path):
    """One image through the loader's steps: 224 x 224 RGB, added into its batch slot."""
    pytest.importorskip("PIL")
    np = pytest.importorskip("numpy")
    jpegs, _ = input_probe.imagenet_like_jpegs(1, target=40_000, tolerance=0.05)
    path = tmp_path / "a.JPEG"
    path.write_bytes(jpegs[0])
    img = input_probe.load_and_transform(str(path), random.Random(0))
    assert img.size == (224, 224) and img.mode == "RGB"
    collate = input_probe.Collate()
    batch = collate.new(2)
    collate.put(batch, 1, img)
    got = np.asarray(batch[1]) if collate.torch is None else batch[1].permute(1, 2, 0).numpy()
    assert (got == np.asarray(img)).all() and not np.asarray(batch[0]).any()


def test_default_levels_double_up_to_the_cores():
    assert input_probe.default_levels(16) == [1, 2, 4, 8, 16]
    assert input_probe.default_levels(2) == [1, 2]
    assert input_probe.default_levels(1) == [1]
    assert math.isclose(input_probe.TARGET_BYTES, 147_897_477_120 / 1_281_167 - 770, rel_tol=2e-3)


@pytest.mark.parametrize("argv, says", [(["--workers", "2,x"], "is not a list of counts"),
                                        (["--workers", "0"], "--workers must be >= 1"),
                                        (["--window", "0"], "--window > 0")])
def test_bad_levels_are_refused_in_one_line(argv, says, capsys, tmp_path):
    refused(input_probe.main, ["--out", tmp_path] + argv, says, capsys)
    assert not (tmp_path / "input_probe.json").exists()
