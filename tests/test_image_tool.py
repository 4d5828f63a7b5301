"""image_tool: crops, resizes, flips and colour changes on Pillow images; batch augmentation."""

import random

import numpy as np
import pytest

from singa import image_tool

Image = pytest.importorskip("PIL.Image")


def _img(w=8, h=6):
    a = np.arange(w * h * 3, dtype=np.uint8).reshape(h, w, 3)
    return Image.fromarray(a, "RGB"), a


@pytest.mark.parametrize(
    "position, rows, cols",
    [
        ("left_top", slice(0, 4), slice(0, 3)),
        ("right_bottom", slice(2, 6), slice(5, 8)),
        ("left_bottom", slice(2, 6), slice(0, 3)),
        ("right_top", slice(0, 4), slice(5, 8)),
        ("center", slice(1, 5), slice(2, 5)),
    ],
)
def test_crop_positions(position, rows, cols):
    img, a = _img()
    out = np.asarray(image_tool.crop(img, (3, 4), position))
    np.testing.assert_array_equal(out, a[rows, cols])


def test_crop_errors():
    img, _ = _img()
    with pytest.raises(ValueError, match="smaller than the patch"):
        image_tool.crop(img, (9, 2), "center")
    with pytest.raises(ValueError, match="position"):
        image_tool.crop(img, (2, 2), "middle")


def test_crop_and_resize_takes_the_largest_square():
    img, a = _img(8, 6)
    out = image_tool.crop_and_resize(img, (6, 6), "right")
    np.testing.assert_array_equal(np.asarray(out), a[:, 2:8])  # same size: no resampling change
    with pytest.raises(ValueError, match="position"):
        image_tool.crop_and_resize(img, (3, 3), "left_top")


def test_resizes_and_flips():
    img, a = _img(8, 6)
    assert image_tool.resize(img, 3).size == (4, 3)
    assert image_tool.resize(Image.new("RGB", (6, 8)), 3).size == (3, 4)
    assert image_tool.scale(img, 3).size == (4, 3)
    assert image_tool.resize_by_hw(img, (5, 7)).size == (7, 5)
    np.testing.assert_array_equal(np.asarray(image_tool.flip(img)), a[:, ::-1])
    np.testing.assert_array_equal(np.asarray(image_tool.flip_down(img)), a[::-1])


def test_color_cast_shifts_whole_channels_within_the_offset():
    img = Image.fromarray(np.full((4, 4, 3), 100, np.uint8), "RGB")
    out = np.asarray(image_tool.color_cast(img, 20, random.Random(1))).astype(int)
    for c in range(3):
        assert len(np.unique(out[:, :, c])) == 1 and abs(out[0, 0, c] - 100) <= 20
    white = Image.fromarray(np.full((2, 2, 3), 250, np.uint8), "RGB")
    outs = [np.asarray(image_tool.color_cast(white, 50, random.Random(s))) for s in range(10)]
    assert max(o.max() for o in outs) == 255  # clipped, never wrapped


def test_enhance_is_seeded_and_changes_the_image_sometimes():
    img, _ = _img()
    a = np.asarray(image_tool.enhance(img, 0.5, random.Random(4)))
    b = np.asarray(image_tool.enhance(img, 0.5, random.Random(4)))
    np.testing.assert_array_equal(a, b)
    changed = [
        not np.array_equal(np.asarray(image_tool.enhance(img, 0.5, random.Random(s))), np.asarray(img))
        for s in range(8)
    ]
    assert any(changed)


def test_get_list_sample_keeps_order():
    s = image_tool.get_list_sample(list("abcdefg"), 3, random.Random(0))
    assert len(set(s)) == 3 and s == sorted(s)


def test_image_tool_chains_and_counts_variants():
    img, _ = _img(12, 10)
    tool = image_tool.ImageTool(seed=0).set([img])
    imgs = tool.resize_by_list([10], 1).crop5((6, 6), 5).flip(2).get()
    assert len(imgs) == 10 and all(i.size == (6, 6) for i in imgs)
    tool.set([img])
    assert len(tool.crop3((4, 4), 3, inplace=False)) == 3
    assert len(tool.crop8((4, 4), 8, inplace=False)) == 8
    same, turned = tool.rotate_by_list([0, 90], 2, inplace=False)
    assert turned.size == (12, 10) and np.array_equal(np.asarray(same), np.asarray(img))
    assert not np.array_equal(np.asarray(turned), np.asarray(img))
    assert tool.resize_by_hw_range(((5, 7), (8, 10)), inplace=False)[0].size[1] in (5, 6)
    assert tool.random_crop_resize((5, 5), inplace=False)[0].size == (5, 5)
    assert tool.color_cast(10).enhance(0.1).get()[0].size == (12, 10)
    with pytest.raises(ValueError, match="num_case"):
        tool.crop5((4, 4), 6)
    with pytest.raises(ValueError, match="square"):
        tool.crop3((4, 5))
    with pytest.raises(ValueError, match="num_case must be 1 or 2"):
        tool.flip(3)


def test_random_crop_is_repeatable_with_a_seed():
    img, a = _img(12, 10)
    crops = [
        np.asarray(image_tool.ImageTool(seed=7).set([img]).random_crop((5, 4)).get()[0]) for _ in range(2)
    ]
    np.testing.assert_array_equal(crops[0], crops[1])
    assert crops[0].shape == (4, 5, 3)
    # the crop is a window of the original
    found = any(np.array_equal(crops[0], a[t : t + 4, s : s + 5]) for t in range(7) for s in range(8))
    assert found


def test_load_img(tmp_path):
    img, a = _img()
    img.save(tmp_path / "x.png")
    np.testing.assert_array_equal(np.asarray(image_tool.load_img(str(tmp_path / "x.png"))), a)
    assert image_tool.ImageTool().load(str(tmp_path / "x.png"), grayscale=True).get()[0].mode == "L"


def test_augment_batch_crops_windows_of_the_padded_image_and_flips():
    x = np.random.default_rng(0).random((64, 2, 8, 8)).astype(np.float32)
    out = image_tool.augment_batch(x, np.random.default_rng(1), padding=2)
    assert out.shape == x.shape and out.dtype == x.dtype
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    flips = 0
    for i in range(len(x)):
        windows = [padded[i, :, t : t + 8, s : s + 8] for t in range(5) for s in range(5)]
        plain = any(np.array_equal(out[i], w) for w in windows)
        mirrored = any(np.array_equal(out[i], w[:, :, ::-1]) for w in windows)
        assert plain or mirrored
        flips += mirrored and not plain
    assert 10 < flips < 54
    again = image_tool.augment_batch(x, np.random.default_rng(1), padding=2)
    np.testing.assert_array_equal(out, again)
    with pytest.raises(ValueError, match="N, C, H, W"):
        image_tool.augment_batch(x[0], np.random.default_rng(0))
