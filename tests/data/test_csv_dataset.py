"""CSVDataset: header detection, target column, class mapping, regression, bad cells."""

from __future__ import annotations

import numpy as np
import pytest

from singa import data


def test_header_target_and_class_names(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,b,kind,c\n1,2,dog,3\n4,5,cat,6\n7,8.5,dog,-1e1\n")
    ds = data.CSVDataset(p, target="kind")
    assert ds.feature_names == ("a", "b", "c") and ds.target_name == "kind"
    assert ds.class_names == ("cat", "dog")
    np.testing.assert_array_equal(ds.x, np.array([[1, 2, 3], [4, 5, 6], [7, 8.5, -10]], np.float32))
    assert ds.y.tolist() == [1, 0, 1] and ds.y.dtype == np.int32
    x, y = ds[2]
    assert y == 1 and x.tolist() == [7, 8.5, -10]


def test_no_header_last_column_and_numeric_classes_sorted_as_numbers(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("0.5,1,10\n0.25,2,9\n1,3,10\n")
    ds = data.CSVDataset(p)
    assert ds.feature_names == ("0", "1") and ds.class_names == ("9", "10")
    assert ds.y.tolist() == [1, 0, 1]


def test_regression_targets(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("x,y\n1,0.5\n2,1.5\n")
    ds = data.CSVDataset(p, task="regression")
    assert ds.y.dtype == np.float32 and ds.y.tolist() == [0.5, 1.5] and ds.class_names is None


@pytest.mark.parametrize(
    "text,match",
    [
        ("a,b,y\n1,2,0\n1,x,1\n", r"row 3, column 'b': 'x' is not a number"),
        ("a,b,y\n1,2,0\n1,,1\n", r"row 3, column 'b': missing value"),
        ("a,b,y\n1,2,0\n1,NA,1\n", r"row 3, column 'b': missing value"),
        ("a,b,y\n1,2,0\n1,2,\n", r"row 3, column 'y': missing label"),
        ("a,b,y\n1,2,0\n1,2\n", r"row 3 has 2 cells"),
        ("", r"empty"),
        ("a,b,y\n", r"no data rows"),
    ],
)
def test_bad_cells_name_the_row_and_column(tmp_path, text, match):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(data.DataFormatError, match=match) as e:
        data.CSVDataset(p)
    assert "bad.csv" in str(e.value) and len(str(e.value).splitlines()) == 1


def test_unknown_target_column(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(data.DataFormatError, match="no column named 'z'"):
        data.CSVDataset(p, target="z")
    with pytest.raises(ValueError, match="task must be"):
        data.CSVDataset(p, task="ranking")
