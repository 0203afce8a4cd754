"""Realistic evidence for a query encoder: a KB's dev queries in users' words, ranked the way the service
first scores a FAQ (its best phrasing's cosine mixed with its answer's by the answer weight) against the
teacher's vectors of the KB's phrasings and answers.

The held-out corpus sentences' nearest-neighbour agreement rose with more training while top-1 on users'
wording fell (docs/results.md), so which epoch is kept, and whether a KB refinement is kept at all, is
decided here, never on the KB's own phrasings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

ANSWER_WEIGHT = 0.6  # the service's default FAQ_ANSWER_WEIGHT


@dataclass
class DevSet:
    name: str
    queries: list[str]
    labels: np.ndarray  # (n,) FAQ row of each in-scope query
    faq_ids: list[str]
    phrasing_texts: list[str]
    phrasing_faq: np.ndarray  # (p,) FAQ row of each phrasing
    answer_texts: list[str | None]  # per FAQ; None: no real answer (placeholder)
    phrasings: np.ndarray | None = field(default=None, repr=False)  # (p, d) teacher vectors
    answers: np.ndarray | None = field(default=None, repr=False)  # (f, d); rows of FAQs without answer unused

    def texts(self) -> list[str]:
        """Every FAQ-side text the teacher encodes."""
        return self.phrasing_texts + [a for a in self.answer_texts if a]

    def attach(self, teacher_vectors: Callable[[list[str]], np.ndarray]) -> "DevSet":
        self.phrasings = np.asarray(teacher_vectors(self.phrasing_texts), dtype=np.float32)
        answers = [a for a in self.answer_texts if a]
        dim = self.phrasings.shape[1]
        self.answers = np.zeros((len(self.faq_ids), dim), dtype=np.float32)
        if answers:
            rows = [i for i, a in enumerate(self.answer_texts) if a]
            self.answers[rows] = np.asarray(teacher_vectors(answers), dtype=np.float32)
        return self

    def top1(self, query_vectors: np.ndarray, answer_weight: float = ANSWER_WEIGHT) -> float:
        """Share of in-scope dev queries whose best FAQ is the labelled one; `query_vectors` (n, d)
        L2-normalised, in `queries` order."""
        assert self.phrasings is not None and self.answers is not None, "attach() the teacher's vectors first"
        scores = self.scores(query_vectors, answer_weight)
        return float((scores.argmax(1) == self.labels).mean()) if len(self.labels) else 0.0

    def scores(self, query_vectors: np.ndarray, answer_weight: float = ANSWER_WEIGHT) -> np.ndarray:
        cos = query_vectors @ self.phrasings.T  # (n, p)
        best = np.full((len(query_vectors), len(self.faq_ids)), -1.0, dtype=np.float32)
        for row in range(len(self.faq_ids)):
            cols = np.flatnonzero(self.phrasing_faq == row)
            if len(cols):
                best[:, row] = cos[:, cols].max(1)
        has_answer = np.array([a is not None for a in self.answer_texts])
        mixed = (1.0 - answer_weight) * best + answer_weight * (query_vectors @ self.answers.T)
        return np.where(has_answer[None, :], mixed, best)


def read_dev_set(kb_file: str | Path, dev_file: str | Path) -> DevSet:
    """The KB's phrasings and answers, and the dev file's in-scope queries (out-of-scope ones and labels
    the KB lacks are skipped: they have no right FAQ to rank first)."""
    from kb.records import is_placeholder
    from kb.files import read_kb, read_queries

    records = read_kb(kb_file)
    faq_ids: list[str] = []
    row_of: dict[str, int] = {}
    answers: list[str | None] = []
    phrasings: list[str] = []
    phrasing_faq: list[int] = []
    for r in records:
        if r.faq_id not in row_of:
            row_of[r.faq_id] = len(faq_ids)
            faq_ids.append(r.faq_id)
            answers.append(" ".join(r.answer.split()) if r.answer and not is_placeholder(r.answer) else None)
        phrasings.append(" ".join(r.question.split()))
        phrasing_faq.append(row_of[r.faq_id])
    queries, labels = [], []
    for q in read_queries(dev_file):
        if q.faq_id is not None and q.faq_id in row_of:
            queries.append(" ".join(q.query.split()))
            labels.append(row_of[q.faq_id])
    if not queries:
        raise ValueError(f"{dev_file}: no in-scope query labelled with a FAQ of {kb_file}")
    return DevSet(name=Path(dev_file).parent.name, queries=queries, labels=np.asarray(labels), faq_ids=faq_ids,
                  phrasing_texts=phrasings, phrasing_faq=np.asarray(phrasing_faq), answer_texts=answers)


def pair_dev_files(kb_files: Sequence[str | Path], dev_files: Sequence[str | Path]) -> list[tuple[Path, Path]]:
    """Each dev file with its KB: the only KB given, else the KB file in the dev file's folder."""
    kbs = [Path(k) for k in kb_files]
    pairs = []
    for dev in map(Path, dev_files):
        if len(kbs) == 1:
            pairs.append((kbs[0], dev))
            continue
        same = [k for k in kbs if k.resolve().parent == dev.resolve().parent]
        if len(same) != 1:
            raise ValueError(f"--dev {dev}: give its KB with --kb from the same folder (found {len(same)})")
        pairs.append((same[0], dev))
    return pairs
