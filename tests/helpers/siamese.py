"""The Siamese tests' toys: a small vocabulary, a word representation without downloads, a toy KB
with dev queries."""
from __future__ import annotations

import json
import zlib

import numpy as np
import torch


VOCAB = {w: i for i, w in enumerate(["the", "how", "do", "i", "receive", "recipe", "money", "e", "mail", "what",
                                     "is", "cafe", "price", "10000", "reset", "password", "email"])}


class ToyWords:
    """A word representation without downloads: each word a fixed random vector seeded by its spelling."""

    kind = "glove"
    dim = 50
    vocab = VOCAB

    def states(self, texts, max_len):
        out = []
        for text in texts:
            rows = [np.random.default_rng(zlib.crc32(w.encode())).standard_normal(self.dim).astype(np.float32)
                    for w in text.split()[:max_len]]
            out.append(torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, self.dim))
        return out

    def meta(self):
        return {"kind": self.kind, "model": "toy"}


def toy_kb(tmp_path):
    kb = {"reset": ["how do i reset the password", "reset password", "i forgot the password"],
          "email": ["what is the email", "how do i email", "e mail address"],
          "price": ["what is the price", "the price of the recipe", "how much money"]}
    path = tmp_path / "kb.jsonl"
    path.write_text("".join(json.dumps({"faq_id": f, "question": q, "answer": f"about {f}"}) + "\n"
                            for f, qs in kb.items() for q in qs), encoding="utf-8")
    queries = tmp_path / "dev.jsonl"
    queries.write_text("".join(json.dumps(r) + "\n" for r in [
        {"query": "reset the password", "faq_id": "reset"}, {"query": "the email", "faq_id": "email"},
        {"query": "what is the price of money", "faq_id": "price"}, {"query": "the weather", "faq_id": None}]),
        encoding="utf-8")
    return kb, path, queries
