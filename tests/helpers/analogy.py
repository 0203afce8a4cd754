"""The analogy tests' toys: a word representation without downloads and who / when QA lists."""
from __future__ import annotations

import zlib

import numpy as np
import torch

from training.mmaicm import QaList


class ToyWords:
    """A word representation without downloads: each word a fixed random vector seeded by its spelling."""

    kind = "glove"
    dim = 50

    def states(self, texts, max_len):
        out = []
        for text in texts:
            rows = [np.random.default_rng(zlib.crc32(w.encode())).standard_normal(self.dim).astype(np.float32)
                    for w in text.lower().split()[:max_len]]
            out.append(torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, self.dim))
        return out

    def meta(self):
        return {"kind": self.kind, "model": "toy"}


def qa_lists():
    """Who questions answered by a person sentence, when questions by a year sentence; wrong candidates
    of the other kind."""
    people = ["alice", "bob", "carol", "dave", "erin", "frank"]
    things = ["the bridge", "the radio", "the engine", "the vaccine", "the telescope", "the lamp"]
    years = ["1901", "1922", "1950", "1969", "1984", "2001"]
    lists = []
    for p, t, y in zip(people, things, years):
        lists.append(QaList(f"who built {t} ?", [f"{p} built {t} long ago", f"{t} was built in {y}"], [1, 0]))
        lists.append(QaList(f"when was {t} built ?", [f"{t} was built in {y}", f"{p} built {t} long ago"], [1, 0]))
    return lists
