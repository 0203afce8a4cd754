"""User-like slips for the fine-tuning: a query typed in a hurry still means what its clean text means, so
the student learns to put `slip(text)` where the teacher puts `text`.

One slip per call, in one word of 4+ letters: two neighbouring letters swapped, one dropped, or one
doubled; or, for a text ending in "?" / ".", that mark dropped (chat users rarely type it). MiniLM's
tokenizer lower-cases, so case is no slip.
"""
from __future__ import annotations

import re

import numpy as np

_WORD = re.compile(r"[A-Za-z]{4,}")


def slip(text: str, rng: np.random.Generator) -> str:
    words = list(_WORD.finditer(text))
    if not words or (text[-1:] in "?." and rng.random() < 0.25):
        return text[:-1].rstrip() if text[-1:] in "?." else text
    m = words[int(rng.integers(len(words)))]
    w, k = m.group(), int(rng.integers(1, len(m.group()) - 1))  # never the first letter: users rarely miss it
    kind = int(rng.integers(3))
    if kind == 0:
        w = w[:k] + w[k + 1] + w[k] + w[k + 2:] if k + 1 < len(w) else w[:k - 1] + w[k] + w[k - 1]
    elif kind == 1:
        w = w[:k] + w[k + 1:]
    else:
        w = w[:k] + w[k] + w[k:]
    return text[:m.start()] + w + text[m.end():]
