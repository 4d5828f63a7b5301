"""String operators and TfIdfVectorizer (the ``text`` family): values against Python's
own string methods and a hand count of n-grams; bad inputs named."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from sonnx_helpers import run_node_model

from singa import sonnx


def _s(*words, shape=None):
    a = np.array(list(words), dtype=object)
    return a.reshape(shape) if shape else a


def test_string_normalizer_drops_stopwords_then_changes_case():
    x = _s("Monday", "tuesday", "MONDAY", "wed", shape=(1, 4))
    (y,) = run_node_model(
        "StringNormalizer", {"x": x}, opset=10, stopwords=["monday"], case_change_action="UPPER"
    )
    np.testing.assert_array_equal(y, _s("TUESDAY", "WED", shape=(1, 2)))  # case-insensitive by default
    (y,) = run_node_model(
        "StringNormalizer", {"x": x[0]}, opset=10, stopwords=["monday"], is_case_sensitive=1
    )
    np.testing.assert_array_equal(y, _s("Monday", "tuesday", "MONDAY", "wed"))
    (y,) = run_node_model("StringNormalizer", {"x": _s("a", "A")}, opset=10, stopwords=["a"])
    np.testing.assert_array_equal(y, _s(""))  # everything dropped: one empty string


@pytest.mark.parametrize("sep, most", [(None, None), (",", None), (",", 1), ("", 2)])
def test_string_split_is_str_split_padded(sep, most):
    x = _s("a,b,,c", "x y  z", "", shape=(3,))
    attrs = {k: v for k, v in {"delimiter": sep, "maxsplit": most}.items() if v is not None}
    parts, counts = run_node_model("StringSplit", {"x": x}, n_out=2, opset=20, **attrs)
    want = [s.split(sep or None, -1 if most is None else most) for s in x]
    width = max(len(p) for p in want)
    np.testing.assert_array_equal(counts, [len(p) for p in want])
    np.testing.assert_array_equal(
        parts, _s(*[w for p in want for w in p + [""] * (width - len(p))], shape=(3, width))
    )


def test_string_concat_broadcasts_and_regex_full_match():
    (y,) = run_node_model("StringConcat", {"a": _s("x", "yy", "é"), "b": _s("!")}, opset=20)
    np.testing.assert_array_equal(y, _s("x!", "yy!", "é!"))
    (m,) = run_node_model(
        "RegexFullMatch", {"x": _s("ab12", "ab", "12ab", shape=(3, 1))}, opset=20, pattern=r"[a-z]+\d*"
    )
    np.testing.assert_array_equal(m, [[True], [True], [False]])
    with pytest.raises(ValueError, match=r"RegexFullMatch node .*bad pattern"):
        run_node_model("RegexFullMatch", {"x": _s("a")}, opset=20, pattern="(")


def test_tfidf_vectorizer_counts_ngrams_with_skips():
    # pool: unigrams 2, 3; bigrams (2, 3), (3, 5); output indexes 0..3
    attrs = dict(
        mode="TF",
        min_gram_length=1,
        max_gram_length=2,
        max_skip_count=1,
        ngram_counts=[0, 2],
        ngram_indexes=[0, 1, 2, 3],
        pool_int64s=[2, 3, 2, 3, 3, 5],
    )
    x = np.array([[2, 3, 5, 3, 4, 5], [2, 4, 3, 1, 1, 5]], np.int32)
    (y,) = run_node_model("TfIdfVectorizer", {"x": x}, opset=9, **attrs)

    def hand(row):
        counts = [row.count(2), row.count(3), 0, 0]
        for gap in (1, 2):  # bigrams with 0 and 1 skipped items between
            pairs = list(zip(row, row[gap:]))
            counts[2] += pairs.count((2, 3))
            counts[3] += pairs.count((3, 5))
        return counts

    np.testing.assert_array_equal(y, [hand(list(r)) for r in x])
    weights = [0.5, 1.0, 2.0, 4.0]
    (idf,) = run_node_model(
        "TfIdfVectorizer", {"x": x}, opset=9, **(attrs | {"mode": "IDF", "weights": weights})
    )
    np.testing.assert_allclose(idf, (y > 0) * weights)
    (tfidf,) = run_node_model(
        "TfIdfVectorizer", {"x": x[0]}, opset=9, **(attrs | {"mode": "TFIDF", "weights": weights})
    )
    np.testing.assert_allclose(tfidf, y[0] * weights)


def test_a_number_tensor_given_to_a_string_operator_is_named():
    with pytest.raises(TypeError, match=r"StringConcat node .*a string tensor expected, got float32"):
        run_node_model("StringConcat", {"a": np.zeros(2, np.float32), "b": _s("x")}, opset=20)


def test_unicode_arrays_are_string_tensors_too():
    (y,) = run_node_model("StringConcat", {"a": _s("x", "y"), "b": _s("1", "2")}, opset=20)
    vis = [helper.make_tensor_value_info(n, TensorProto.STRING, [2]) for n in "ab"]
    out = helper.make_tensor_value_info("y", TensorProto.STRING, [2])
    g = helper.make_graph([helper.make_node("StringConcat", ["a", "b"], ["y"])], "g", vis, [out])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    (z,) = sonnx.prepare(model).run([np.array(["x", "y"]), np.array(["1", "2"])])  # dtype <U1
    np.testing.assert_array_equal(z, y)
    assert z.dtype == object
