"""load_user_data: image folders (with and without train/val sub-folders), npz, csv;
splits, class names, training-split statistics, bad data."""

from __future__ import annotations

import numpy as np
import pytest
from image_data import make_image_folder, make_table

from singa import data


def test_spec_parsing(tmp_path):
    assert data.parse_data_spec("imagefolder:/x") == ("imagefolder", "/x")
    assert data.parse_data_spec("NPZ:a.npz") == ("npz", "a.npz")
    assert data.parse_data_spec(str(tmp_path)) == ("imagefolder", str(tmp_path))
    assert data.parse_data_spec("t.csv") == ("csv", "t.csv")
    assert data.parse_data_spec("fashion-mnist-mini") is None


def test_image_folder_with_a_stratified_split(tmp_path):
    root = make_image_folder(tmp_path / "f", per_class=10)
    ud = data.load_user_data(f"imagefolder:{root}", val_split=0.2, seed=1)
    assert len(ud.x_train) == 24 and len(ud.x_val) == 6
    assert np.bincount(ud.x_val.targets).tolist() == [2, 2, 2]
    assert ud.info.class_names == ("circle", "square", "triangle") and ud.info.sample_shape == (3, 12, 12)
    x = np.stack([ud.x_train[i][0] for i in range(len(ud.x_train))])
    m, s = data.channel_mean_std(x)
    np.testing.assert_allclose(ud.mean, m, rtol=1e-5)
    np.testing.assert_allclose(ud.std, s, rtol=1e-5)
    again = data.load_user_data(str(root), val_split=0.2, seed=1)
    assert again.x_val.samples == ud.x_val.samples


def test_image_folder_with_train_and_val_folders(tmp_path):
    make_image_folder(tmp_path / "f" / "train", per_class=4)
    make_image_folder(tmp_path / "f" / "val", per_class=2, seed=5)
    ud = data.load_user_data(f"imagefolder:{tmp_path / 'f'}", channels=1, image_size=8)
    assert len(ud.x_train) == 12 and len(ud.x_val) == 6
    assert ud.info.sample_shape == (1, 8, 8)


def test_single_class_and_skip_bad(tmp_path):
    root = make_image_folder(tmp_path / "one", classes=("only",), per_class=3)
    with pytest.raises(data.DataFormatError, match="only one class"):
        data.load_user_data(str(root))
    root = make_image_folder(tmp_path / "f", per_class=4)
    (root / "square" / "img001.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    with pytest.raises(data.DataFormatError, match="img001.jpg"):
        data.load_user_data(str(root), val_split=0.25)
    ud = data.load_user_data(str(root), val_split=0.25, skip_bad=True)
    assert len(ud.skipped) == 1 and "img001.jpg" in ud.skipped[0]
    assert len(ud.x_train) + len(ud.x_val) == 11


def test_npz_forms(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(40, 6, 6), dtype=np.uint8)
    y = np.arange(40) % 4
    np.savez(tmp_path / "a.npz", x=x, y=y, class_names=np.array(["a", "b", "c", "d"]))
    ud = data.load_user_data(f"npz:{tmp_path / 'a.npz'}", val_split=0.25, seed=0)
    assert ud.info.sample_shape == (1, 6, 6) and ud.info.class_names == ("a", "b", "c", "d")
    assert len(ud.x_train) == 28 and len(ud.x_val) == 12  # 2.5 of each class's 10 rounds up
    assert ud.x_train.x.max() <= 1.0  # uint8 scaled
    np.savez(tmp_path / "b.npz", x_train=x[:30], y_train=y[:30], x_val=x[30:], y_val=y[30:])
    ud = data.load_user_data(str(tmp_path / "b.npz"))
    assert len(ud.x_val) == 10 and ud.info.class_names == ("0", "1", "2", "3")


@pytest.mark.parametrize(
    "arrays,match",
    [
        ({"x": np.zeros((4, 2)), "y": np.array([0, 1, 0, -1])}, "class indices"),
        ({"x": np.array([[0.0, np.nan], [1, 1]]), "y": np.array([0, 1])}, "missing or infinite.*sample 0"),
        ({"images": np.zeros((4, 2))}, "needs arrays x_train"),
        ({"x": np.zeros((4, 2)), "y": np.zeros(3)}, r"must have shape \(4,\)"),
        ({"x": np.zeros((4, 2)), "y": np.zeros(4)}, "only one class"),
    ],
)
def test_bad_npz(tmp_path, arrays, match):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(data.DataFormatError, match=match):
        data.load_user_data(f"npz:{tmp_path / 'bad.npz'}")


def test_npz_with_objects_is_refused_without_pickle(tmp_path):
    np.savez(tmp_path / "o.npz", x=np.array([{"a": 1}] * 4, dtype=object), y=np.arange(4))
    with pytest.raises(data.DataFormatError, match="without pickle"):
        data.load_user_data(str(tmp_path / "o.npz"))


def test_csv_classification_and_regression(tmp_path):
    x, y = make_table(60)
    lines = ["f1,f2,f3,f4,label"] + [",".join(f"{v:.4f}" for v in row) + f",c{t}" for row, t in zip(x, y)]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    ud = data.load_user_data(f"csv:{tmp_path / 't.csv'}", val_split=0.2, seed=0)
    assert ud.info.class_names == ("c0", "c1", "c2") and ud.info.sample_shape == (4,)
    assert len(ud.x_train) + len(ud.x_val) == 60
    np.testing.assert_allclose(ud.mean, ud.x_train.x.mean(axis=0), rtol=1e-5, atol=1e-6)
    (tmp_path / "r.csv").write_text("\n".join(ln.rsplit(",", 1)[0] for ln in lines) + "\n")
    reg = data.load_user_data(str(tmp_path / "r.csv"), target="f4", task="regression", val_split=0.5)
    assert reg.task == "regression" and reg.x_train.y.dtype == np.float32 and len(reg.x_val) == 30


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="npz data file not found"):
        data.load_user_data(f"npz:{tmp_path / 'none.npz'}")
    with pytest.raises(FileNotFoundError, match="not a folder"):
        data.load_user_data(f"imagefolder:{tmp_path / 'none'}")


def test_imposed_class_names(tmp_path):
    root = make_image_folder(tmp_path / "f", classes=("b", "c"), per_class=2)
    ud = data.load_user_data(str(root), val_split=0.0, class_names=("a", "b", "c"), stats=False)
    assert ud.info.class_names == ("a", "b", "c") and sorted(set(ud.x_train.targets)) == [1, 2]
    assert ud.mean.tolist() == [0, 0, 0] and ud.std.tolist() == [1, 1, 1]
    (tmp_path / "t.csv").write_text("x,y\n1,b\n2,c\n")
    ud = data.load_user_data(str(tmp_path / "t.csv"), val_split=0.0, class_names=("a", "b", "c"))
    assert ud.x_train.y.tolist() == [1, 2]
    with pytest.raises(data.DataFormatError, match="row 2, column 'y': unknown class 'b'"):
        data.load_user_data(str(tmp_path / "t.csv"), class_names=("a", "c"))
