"""Text data: the character vocabulary (round trip, JSON, errors), the split by
position, window batches and the bundled public-domain text."""

import numpy as np
import pytest

from singa.data import text


def test_vocab_round_trip_and_json():
    v = text.CharVocab.from_text("hello world")
    assert v.chars == " dehlorw" and len(v) == 8
    ids = v.encode("hold")
    assert ids.dtype == np.int64 and v.decode(ids) == "hold"
    assert text.CharVocab.from_json(v.to_json()).chars == v.chars
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        v.encode("zoo")
    with pytest.raises(ValueError, match="not a character vocabulary"):
        text.CharVocab.from_json('{"kind": "bpe"}')
    with pytest.raises(ValueError, match="token ids"):
        v.decode([8])


def test_split_by_position(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("abcdefghij" * 10, encoding="utf-8")
    d = text.load_text(f, val_fraction=0.2)
    assert len(d.train) == 80 and len(d.val) == 20
    assert d.vocab.decode(d.train[:3]) == "abc" and d.vocab.decode(d.val[:3]) == "abc"
    np.testing.assert_array_equal(np.concatenate([d.train, d.val]), d.vocab.encode("abcdefghij" * 10))


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file"):
        text.load_text(tmp_path / "missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ab\xff\xfe")
    with pytest.raises(ValueError, match="not UTF-8"):
        text.load_text(bad)
    short = tmp_path / "s.txt"
    short.write_text("ab", encoding="utf-8")
    with pytest.raises(ValueError, match="at least 4"):
        text.load_text(short)


def test_windows():
    tokens = np.arange(50)
    batches = list(text.random_windows(tokens, 3, 8, steps=4, seed=1))
    assert len(batches) == 4
    for x, y in batches:
        assert x.shape == y.shape == (3, 8)
        np.testing.assert_array_equal(y, x + 1)
    again = list(text.random_windows(tokens, 3, 8, steps=4, seed=1))
    np.testing.assert_array_equal(batches[2][0], again[2][0])
    ev = list(text.eval_windows(tokens, 4, 8))
    assert [x.shape[0] for x, _ in ev] == [4, 2]  # 6 windows start at 0, 8, ..., 40
    assert ev[0][0][1, 0] == 8
    with pytest.raises(ValueError, match="too few"):
        next(text.random_windows(np.arange(5), 2, 8, steps=1))


def test_bundled_text_is_shakespeare():
    d = text.load_text(None)
    assert d.source.startswith("tinyshakespeare")
    assert len(d.vocab) == 65 and len(d.train) + len(d.val) == 1115394
    assert d.vocab.decode(d.train[:14]) == "First Citizen:"
