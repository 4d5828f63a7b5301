"""Text: ONNX's string operators (StringNormalizer, StringSplit, StringConcat,
RegexFullMatch) and TfIdfVectorizer, computed when the node runs.

A string tensor is a Tensor over a numpy array of Python ``str`` (dtype object, as
``onnx.numpy_helper`` reads ONNX strings); nothing here has a gradient. RegexFullMatch
uses Python's ``re`` (ONNX names RE2, whose syntax ``re`` covers for the usual patterns,
as ONNX's reference does).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from singa.sonnx.context import NodeContext, builds
from singa.tensor import Tensor

CASE_ACTIONS = ("NONE", "LOWER", "UPPER")


def _strings(ctx: NodeContext, x: Tensor) -> np.ndarray:
    a = np.asarray(x.to_numpy())
    if a.dtype.kind not in "OU":
        raise TypeError(f"ONNX run: {ctx.op_type} node {ctx.name!r}: a string tensor expected, got {a.dtype}")
    return a.astype(object)


def _text(values: list | np.ndarray, shape: tuple) -> np.ndarray:
    """An object array of ``shape`` holding ``values`` (strings stay whole)."""
    out = np.empty(shape, dtype=object)
    out.reshape(-1)[:] = list(np.asarray(values, dtype=object).reshape(-1))
    return out


@builds()
def handle_string_normalizer(ctx: NodeContext, xs: list) -> Tensor:
    """StringNormalizer of a [C] or [1, C] string tensor: elements equal to a ``stopwords``
    entry removed (ignoring case unless ``is_case_sensitive``), then lower- or upper-cased
    (``case_change_action``); all removed gives one empty string."""
    x = _strings(ctx, xs[0])
    action = ctx.attr("case_change_action", "NONE")
    if action not in CASE_ACTIONS:
        raise ctx.unsupported(f"case_change_action {action!r} (one of {', '.join(CASE_ACTIONS)})")
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise ValueError(f"ONNX run: StringNormalizer node {ctx.name!r}: input [C] or [1, C], got {x.shape}")
    sensitive = bool(int(ctx.attr("is_case_sensitive", 0)))
    stops = set(ctx.attr("stopwords", []))
    if not sensitive:
        stops = {w.lower() for w in stops}
    kept = [w for w in x.reshape(-1) if (w if sensitive else w.lower()) not in stops]
    if action != "NONE":
        kept = [w.lower() if action == "LOWER" else w.upper() for w in kept]
    kept = kept or [""]
    return ctx.const(_text(kept, (len(kept),) if x.ndim == 1 else (1, len(kept))))


@builds()
def handle_string_split(ctx: NodeContext, xs: list) -> list:
    """StringSplit(delimiter, maxsplit): each string split (on runs of whitespace when
    the delimiter is empty or absent), padded with empty strings to the most pieces;
    also the number of pieces of each (int64)."""
    x = _strings(ctx, xs[0])
    sep = ctx.attr("delimiter") or None
    most = ctx.attr("maxsplit")
    parts = [s.split(sep, -1 if most is None else int(most)) for s in x.reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    padded = [p + [""] * (width - len(p)) for p in parts]
    counts = np.array([len(p) for p in parts], np.int64).reshape(x.shape)
    return [ctx.const(_text(padded, (*x.shape, width))), ctx.const(counts)]


@builds()
def handle_string_concat(ctx: NodeContext, xs: list) -> Tensor:
    """StringConcat(X, Y): the strings joined element by element (broadcast)."""
    a, b = np.broadcast_arrays(_strings(ctx, xs[0]), _strings(ctx, xs[1]))
    joined = [p + q for p, q in zip(a.reshape(-1), b.reshape(-1))]
    return ctx.const(_text(joined, a.shape))


@builds()
def handle_regex_full_match(ctx: NodeContext, xs: list) -> Tensor:
    """RegexFullMatch(pattern): whether each string matches the whole pattern (bool)."""
    x = _strings(ctx, xs[0])
    try:
        pattern = re.compile(ctx.attr("pattern", ""))
    except re.error as e:
        raise ValueError(f"ONNX run: RegexFullMatch node {ctx.name!r}: bad pattern ({e})") from e
    hits = [pattern.fullmatch(s) is not None for s in x.reshape(-1)]
    return ctx.const(np.array(hits, bool).reshape(x.shape))


def _pool(ctx: NodeContext) -> dict[tuple, int]:
    """``{n-gram: output index}`` of the n-grams of sizes min..max_gram_length in the pool
    (``ngram_counts[i]`` is where the (i + 1)-grams start)."""
    pool = list(ctx.attr("pool_int64s", []) or ctx.attr("pool_strings", []))
    starts = list(ctx.attr("ngram_counts")) + [len(pool)]
    indexes = list(ctx.attr("ngram_indexes"))
    lo, hi = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    grams: dict[tuple, int] = {}
    k = 0  # the n-gram's position in the pool (ngram_indexes follow it)
    for n, (a, b) in enumerate(zip(starts, starts[1:]), start=1):
        for i in range(a, b - n + 1, n):
            if lo <= n <= hi:
                grams[tuple(pool[i : i + n])] = indexes[k]
            k += 1
    return grams


def _count(row: list, grams: dict, lo: int, hi: int, skips: int) -> Counter:
    """How often each pooled n-gram (of sizes lo..hi, items ``skip + 1`` apart for every
    skip up to ``skips``; unigrams once) occurs in ``row``."""
    found: Counter = Counter()
    for gap in range(1, skips + 2):
        for n in range(max(lo, 1 if gap == 1 else 2), hi + 1):
            for start in range(len(row) - (n - 1) * gap):
                idx = grams.get(tuple(row[start : start + (n - 1) * gap + 1 : gap]))
                if idx is not None:
                    found[idx] += 1
    return found


@builds()
def handle_tfidf_vectorizer(ctx: NodeContext, xs: list) -> Tensor:
    """TfIdfVectorizer of [C] or [B, C] integers or strings: counts of the pooled n-grams
    (``mode`` TF), their presence (IDF) or counts (TFIDF), times ``weights`` when given."""
    x = np.asarray(ctx.static(xs[0]))
    if x.ndim not in (1, 2):
        raise ValueError(f"ONNX run: TfIdfVectorizer node {ctx.name!r}: input [C] or [B, C], got {x.shape}")
    mode = ctx.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ctx.unsupported(f"mode {mode!r} (TF, IDF or TFIDF)")
    grams = _pool(ctx)
    size = max(ctx.attr("ngram_indexes")) + 1
    lo, hi = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    rows = x.reshape(-1, x.shape[-1]) if x.size or x.ndim == 2 else x.reshape(1, 0)
    freq = np.zeros((rows.shape[0], size), np.float32)
    for r, row in enumerate(rows):
        for idx, c in _count(row.tolist(), grams, lo, hi, int(ctx.attr("max_skip_count", 0))).items():
            freq[r, idx] = c
    weights = np.asarray(ctx.attr("weights", []) or np.ones(size), np.float32)
    if mode == "IDF":
        freq = np.where(freq > 0, weights, np.float32(0))
    elif mode == "TFIDF":
        freq = freq * weights
    return ctx.const(freq.astype(np.float32).reshape(size) if x.ndim == 1 else freq)


EXPORT: dict = {}
IMPORT = {
    "RegexFullMatch": handle_regex_full_match,
    "StringConcat": handle_string_concat,
    "StringNormalizer": handle_string_normalizer,
    "StringSplit": handle_string_split,
    "TfIdfVectorizer": handle_tfidf_vectorizer,
}
