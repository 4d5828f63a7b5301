"""Text for language models: a character vocabulary, a text split by position, and
batches of windows.

``load_text(path)`` reads a UTF-8 file (``None``: the bundled public-domain
tinyshakespeare, see ``embedded/LICENSE-tinyshakespeare.txt``), builds the vocabulary
of its characters (sorted) and splits the token ids by position: the first
``1 - val_fraction`` for training, the rest for validation (no shuffling: validation
text never appears in training). The vocabulary travels with a model as JSON
(:meth:`CharVocab.to_json`), never as pickle.

Example::

    from singa.data import text
    data = text.load_text("book.txt")
    for x, y in text.random_windows(data.train, batch_size=16, context=128, steps=100, seed=0):
        ...  # x, y: (16, 128) int64, y is x shifted by one
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["CharVocab", "TextData", "load_text", "random_windows", "eval_windows", "BUNDLED_TEXT"]

#: the bundled default text (gzip-compressed UTF-8)
BUNDLED_TEXT = Path(__file__).resolve().parent / "embedded" / "tinyshakespeare.txt.gz"


class CharVocab:
    """A character vocabulary: token i is ``chars[i]``."""

    def __init__(self, chars: str):
        if not chars:
            raise ValueError("CharVocab: the vocabulary is empty")
        if len(set(chars)) != len(chars):
            raise ValueError("CharVocab: characters repeat in the vocabulary")
        self.chars = chars
        self._index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        """The sorted set of the characters of ``text``."""
        return cls("".join(sorted(set(text))))

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """Token ids (int64) of ``text``; a character outside the vocabulary is a
        ValueError naming it."""
        try:
            return np.fromiter((self._index[c] for c in text), dtype=np.int64, count=len(text))
        except KeyError as e:
            raise ValueError(f"CharVocab: character {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: np.ndarray) -> str:
        """The text of token ids."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.chars)):
            raise ValueError(f"CharVocab: token ids must be in [0, {len(self.chars)})")
        return "".join(self.chars[i] for i in ids)

    def to_json(self) -> str:
        """The vocabulary as JSON (kept with a checkpoint)."""
        return json.dumps({"kind": "char", "chars": self.chars})

    @classmethod
    def from_json(cls, text: str) -> CharVocab:
        """The vocabulary :meth:`to_json` wrote; ValueError when it is not one."""
        try:
            obj = json.loads(text)
            ok = isinstance(obj, dict) and obj.get("kind") == "char" and isinstance(obj.get("chars"), str)
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise ValueError("CharVocab.from_json: not a character vocabulary written by CharVocab.to_json")
        return cls(obj["chars"])


@dataclass
class TextData:
    """A text's vocabulary and its token ids split by position."""

    vocab: CharVocab
    train: np.ndarray
    val: np.ndarray
    source: str


def _read(path: str | os.PathLike | None) -> tuple[str, str]:
    if path is None:
        with gzip.open(BUNDLED_TEXT, "rt", encoding="utf-8") as f:
            return f.read(), "tinyshakespeare (bundled)"
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"text data: no file {str(p)!r}")
    try:
        return p.read_text(encoding="utf-8"), str(p)
    except UnicodeDecodeError as e:
        raise ValueError(f"text data: {str(p)!r} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def load_text(
    path: str | os.PathLike | None = None, val_fraction: float = 0.1, vocab: CharVocab | None = None
) -> TextData:
    """Read a UTF-8 text (None: the bundled tinyshakespeare), its vocabulary (or the
    given one, e.g. a checkpoint's) and the train/validation split by position."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"text data: val_fraction must be in (0, 1), got {val_fraction}")
    text, source = _read(path)
    if len(text) < 4:
        raise ValueError(f"text data: {source} has {len(text)} characters; at least 4 are needed")
    vocab = vocab if vocab is not None else CharVocab.from_text(text)
    ids = vocab.encode(text)
    cut = min(len(ids) - 2, max(2, int(round(len(ids) * (1.0 - val_fraction)))))
    return TextData(vocab, ids[:cut], ids[cut:], source)


def _check(tokens: np.ndarray, batch_size: int, context: int) -> None:
    if batch_size < 1 or context < 1:
        raise ValueError(f"text batches: batch_size and context must be >= 1, got {batch_size}, {context}")
    if len(tokens) < context + 1:
        raise ValueError(
            f"text batches: {len(tokens)} tokens are too few for windows of context {context} "
            f"(need {context + 1})"
        )


def random_windows(
    tokens: np.ndarray, batch_size: int, context: int, steps: int, seed: int | None = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``steps`` batches of windows at random offsets (seeded): x (B, context) and y,
    the same windows one token later (nanoGPT's batches)."""
    _check(tokens, batch_size, context)
    rng = np.random.default_rng(seed)
    span = np.arange(context)
    for _ in range(int(steps)):
        starts = rng.integers(0, len(tokens) - context, batch_size)
        idx = starts[:, None] + span
        yield tokens[idx], tokens[idx + 1]


def eval_windows(
    tokens: np.ndarray, batch_size: int, context: int, max_batches: int | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Consecutive non-overlapping windows from the start (deterministic), in batches
    of ``batch_size`` (the last may be smaller), at most ``max_batches``."""
    _check(tokens, batch_size, context)
    starts = np.arange(0, len(tokens) - context, context)
    span = np.arange(context)
    for k, i in enumerate(range(0, len(starts), batch_size)):
        if max_batches is not None and k >= max_batches:
            return
        idx = starts[i : i + batch_size, None] + span
        yield tokens[idx], tokens[idx + 1]
