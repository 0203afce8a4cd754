"""Training pairs for MSEM and the paraphrase graph that turns them into intent classes.

What lives here:
- `Pair`, `read_pair_file`: labelled sentence pairs from `label\\tq1\\tq2` TSV files (QQP-like).
- `ParaphraseGraph` / `intent_classes`: each distinct question a vertex, each positive pair an
  edge; connected components (union-find) are intent clusters. Components with MORE than 3
  questions become classes, all smaller ones share one "other" class (paper, section on
  multi-task training). Class 0 is always "other".
- `Bm25Neighbours`: a small BM25 index over KB questions (numpy/scipy sparse) whose nearest
  neighbours are lexical hard negatives before any encoder is trained.
- `NeighbourFn` / `encoder_neighbours`: the hard-negative hook. A *miner* takes the list of
  questions and returns `neighbours(i) -> indices of the most similar other questions, best
  first`; the trainer refreshes it from the current model every epoch or two.
- `KbPairSampler`: per epoch, for every KB question one positive (another variant of its FAQ),
  random negatives and hard negatives (nearest questions of OTHER FAQs). Resampled each epoch.
"""
from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

#: components with MORE than this many distinct questions become intent classes
MIN_CLASS_EXCLUSIVE = 3
OTHER_CLASS = "other"


class PairFileError(ValueError):
    """A pair file line does not parse; the message names file and line."""


@dataclass(frozen=True)
class Pair:
    q1: str
    q2: str
    label: int  # 1 = paraphrase / same FAQ, 0 = different


def read_pair_file(path: str | Path) -> list[Pair]:
    """Read `label<TAB>q1<TAB>q2[<TAB>...]` lines (extra columns, e.g. QQP pair ids, are ignored).

    A first line whose label is not 0/1 is taken as a header and skipped; any later bad line is
    an error naming `file:line`.
    """
    path = Path(path)
    pairs: list[Pair] = []
    errors: list[str] = []
    with path.open(encoding="utf-8-sig") as fh:
        for line_no, line in enumerate(fh, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            cols = line.split("\t")
            if len(cols) < 3:
                errors.append(f"{path}:{line_no}: expected label<TAB>q1<TAB>q2, got {len(cols)} column(s)")
                continue
            label = cols[0].strip()
            if label not in ("0", "1"):
                if line_no == 1:
                    continue  # header
                errors.append(f"{path}:{line_no}: label must be 0 or 1, got {label!r}")
                continue
            q1, q2 = cols[1].strip(), cols[2].strip()
            if not q1 or not q2:
                errors.append(f"{path}:{line_no}: empty question")
                continue
            pairs.append(Pair(q1, q2, int(label)))
    if errors:
        shown = errors[:20] + ([f"... and {len(errors) - 20} more"] if len(errors) > 20 else [])
        raise PairFileError("bad pair file:\n" + "\n".join(shown))
    return pairs


# ---------------------------------------------------------------------------------------------
# paraphrase graph -> intent classes


def read_stsb_scores(path: str | Path) -> list[tuple[float, str, str]]:
    """Raw STS-B csv rows (genre, file, year, id, score 0..5, sentence1, sentence2[, licence fields])
    -> (score, sentence1, sentence2); a malformed row raises PairFileError naming file:line. Split on
    tabs only: the files hold unbalanced quotes."""
    rows = []
    with Path(path).open(encoding="utf-8", newline="") as fh:
        lines = [line.rstrip("\r\n").split("\t") for line in fh if line.strip()]
    for line_no, cols in enumerate(lines, start=1):
        if len(cols) < 7:
            raise PairFileError(f"{path}:{line_no}: expected at least 7 tab-separated columns, got {len(cols)}")
        try:
            score = float(cols[4])
        except ValueError as exc:
            raise PairFileError(f"{path}:{line_no}: score {cols[4]!r} is not a number") from exc
        rows.append((score, cols[5], cols[6]))
    return rows


class ParaphraseGraph:
    """Union-find over distinct question strings (path halving + union by size)."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}  # question -> vertex id, in insertion order
        self._parent: list[int] = []
        self._size: list[int] = []

    def __len__(self) -> int:
        return len(self._parent)

    def add_vertex(self, question: str) -> int:
        vid = self._index.get(question)
        if vid is None:
            vid = len(self._parent)
            self._index[question] = vid
            self._parent.append(vid)
            self._size.append(1)
        return vid

    def add_edge(self, q1: str, q2: str) -> None:
        a, b = self._find(self.add_vertex(q1)), self._find(self.add_vertex(q2))
        if a == b:
            return
        if self._size[a] < self._size[b]:
            a, b = b, a
        self._parent[b] = a
        self._size[a] += self._size[b]

    def add_pairs(self, pairs: Iterable[Pair]) -> None:
        """Every question becomes a vertex; only positive pairs add edges."""
        for pair in pairs:
            if pair.label == 1:
                self.add_edge(pair.q1, pair.q2)
            else:
                self.add_vertex(pair.q1)
                self.add_vertex(pair.q2)

    def add_group(self, questions: Sequence[str]) -> None:
        """All questions of one group are paraphrases of each other (e.g. the variants of a FAQ).
        A chain of edges gives the same component as all pairwise edges."""
        if not questions:
            return
        first = questions[0]
        self.add_vertex(first)
        for q in questions[1:]:
            self.add_edge(first, q)

    def _find(self, v: int) -> int:
        parent = self._parent
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    def components(self) -> list[list[str]]:
        """Components as lists of questions, in order of each component's first-inserted vertex;
        members in insertion order (deterministic for a given input order)."""
        by_root: dict[int, list[str]] = {}
        for question, vid in self._index.items():  # dicts keep insertion order
            by_root.setdefault(self._find(vid), []).append(question)
        return list(by_root.values())


@dataclass(frozen=True)
class IntentClasses:
    """question -> class id. Class 0 is "other"; classes 1..n-1 are the large components."""

    of_question: dict[str, int]
    names: list[str]  # class id -> name ("other", then "c1:<first question>", ...)

    @property
    def n_classes(self) -> int:
        return len(self.names)

    def class_of(self, question: str) -> int:
        """Unknown questions (not in the graph) belong to "other"."""
        return self.of_question.get(question, 0)

    def sizes(self) -> list[int]:
        counts = Counter(self.of_question.values())
        return [counts.get(i, 0) for i in range(self.n_classes)]


def intent_classes(graph: ParaphraseGraph, min_exclusive: int = MIN_CLASS_EXCLUSIVE) -> IntentClasses:
    """Components with more than `min_exclusive` questions -> classes 1..K (in component order);
    every other question -> class 0 ("other")."""
    of_question: dict[str, int] = {}
    names = [OTHER_CLASS]
    for members in graph.components():
        if len(members) > min_exclusive:
            cid = len(names)
            names.append(f"c{cid}:{members[0][:40]}")
            for q in members:
                of_question[q] = cid
        else:
            for q in members:
                of_question[q] = 0
    return IntentClasses(of_question, names)


# ---------------------------------------------------------------------------------------------
# tokenisation + lexical (BM25) neighbours

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def lexical_tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


#: a neighbour function: question index -> indices of the most similar other questions, best first
NeighbourFn = Callable[[int], Sequence[int]]
#: a miner: the list of questions -> a neighbour function over them
NeighbourMiner = Callable[[Sequence[str]], NeighbourFn]


def _top_k_rows(sim_rows: np.ndarray, row_offset: int, k: int) -> np.ndarray:
    """Top-k column indices per row of a dense similarity block, best first, self excluded."""
    n_rows, n_cols = sim_rows.shape
    rows = np.arange(n_rows)
    self_cols = rows + row_offset
    valid = self_cols < n_cols
    sim_rows[rows[valid], self_cols[valid]] = -np.inf
    k = min(k, n_cols - 1) if n_cols > 1 else 0
    if k <= 0:
        return np.zeros((n_rows, 0), dtype=np.int64)
    part = np.argpartition(-sim_rows, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(sim_rows, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1).astype(np.int64)


def nearest_from_vectors(vectors: np.ndarray, k: int, chunk: int = 2048) -> np.ndarray:
    """(n, d) L2-normalised vectors -> (n, k) nearest other rows by cosine, exact, chunked."""
    vectors = np.asarray(vectors, dtype=np.float32)
    out = []
    for start in range(0, len(vectors), chunk):
        sims = vectors[start : start + chunk] @ vectors.T
        out.append(_top_k_rows(sims, start, k))
    return np.concatenate(out) if out else np.zeros((0, k), dtype=np.int64)


def table_neighbours(table: np.ndarray) -> NeighbourFn:
    return lambda i: table[i]


def encoder_neighbours(encode: Callable[[Sequence[str]], np.ndarray], k: int = 20) -> NeighbourMiner:
    """Miner over an encoder's `encode(texts) -> L2-normalised vectors` (the current model's)."""

    def miner(questions: Sequence[str]) -> NeighbourFn:
        return table_neighbours(nearest_from_vectors(encode(list(questions)), k))

    return miner


class Bm25Neighbours:
    """BM25 over a fixed list of short texts. score(q, d) = sum_t idf(t) * tf(t,d)(k1+1) /
    (tf(t,d) + k1(1 - b + b |d| / avgdl)) for the distinct terms t of q."""

    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75):
        from scipy import sparse

        docs = [lexical_tokens(t) for t in texts]
        vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        lengths = np.array([len(d) for d in docs], dtype=np.float32)
        avgdl = float(lengths.mean()) if len(docs) and lengths.mean() > 0 else 1.0
        for r, tokens in enumerate(docs):
            for term, tf in Counter(tokens).items():
                c = vocab.setdefault(term, len(vocab))
                rows.append(r)
                cols.append(c)
                vals.append(tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[r] / avgdl)))
        n = len(docs)
        shape = (n, max(1, len(vocab)))
        self.doc_weights = sparse.csr_matrix((vals, (rows, cols)), shape=shape, dtype=np.float32)
        df = np.bincount(np.asarray(cols, dtype=np.int64), minlength=shape[1]).astype(np.float32)
        # BM25+ style idf that stays positive for very common terms
        self.idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
        binary = sparse.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=shape)
        self.query_weights = binary.multiply(self.idf[None, :]).tocsr()
        self.n = n

    def nearest(self, k: int, chunk: int = 2048) -> np.ndarray:
        """(n, k) lexical nearest other texts, best first."""
        out = []
        doc_t = self.doc_weights.T.tocsc()
        for start in range(0, self.n, chunk):
            sims = (self.query_weights[start : start + chunk] @ doc_t).toarray()
            out.append(_top_k_rows(sims, start, k))
        return np.concatenate(out) if out else np.zeros((0, k), dtype=np.int64)


def lexical_neighbours(k: int = 20) -> NeighbourMiner:
    def miner(questions: Sequence[str]) -> NeighbourFn:
        return table_neighbours(Bm25Neighbours(questions).nearest(k))

    return miner


# ---------------------------------------------------------------------------------------------
# per-epoch pair sampling from a KB


class KbPairSampler:
    """Pairs from KB groups (faq_id -> distinct questions).

    For every question (the anchor), each epoch: `positives` pairs with random other variants of
    its FAQ (FAQs with one variant give no positive), `random_negatives` pairs with a question of a
    random other FAQ, and `hard_negatives` pairs with one of the `hard_pool` nearest questions of
    OTHER FAQs under the current neighbour function (falls back to random when none is set).
    """

    def __init__(
        self,
        groups: dict[str, list[str]],
        positives: int = 1,
        random_negatives: int = 1,
        hard_negatives: int = 1,
        hard_pool: int = 5,
    ):
        self.questions: list[str] = []
        self.faq_of: list[int] = []  # question index -> FAQ index
        self.members: list[list[int]] = []  # FAQ index -> question indices
        for faq_index, qs in enumerate(groups.values()):
            idx = list(range(len(self.questions), len(self.questions) + len(qs)))
            self.questions.extend(qs)
            self.faq_of.extend([faq_index] * len(qs))
            self.members.append(idx)
        self.faq_ids = list(groups)
        self.positives = positives
        self.random_negatives = random_negatives
        self.hard_negatives = hard_negatives
        self.hard_pool = hard_pool
        self.neighbours: NeighbourFn | None = None

    def set_neighbours(self, miner: NeighbourMiner) -> None:
        self.neighbours = miner(self.questions)

    def _random_other(self, i: int, rng: random.Random) -> int:
        n = len(self.questions)
        for _ in range(32):  # with >1 FAQ this almost always succeeds at once
            j = rng.randrange(n)
            if self.faq_of[j] != self.faq_of[i]:
                return j
        return -1

    def _hard_other(self, i: int, rng: random.Random) -> int:
        if self.neighbours is None:
            return self._random_other(i, rng)
        pool = [int(j) for j in self.neighbours(i) if self.faq_of[int(j)] != self.faq_of[i]][: self.hard_pool]
        return rng.choice(pool) if pool else self._random_other(i, rng)

    def sample(self, rng: random.Random) -> list[Pair]:
        if len(self.members) < 2 and (self.random_negatives or self.hard_negatives):
            raise ValueError("the KB needs at least 2 FAQs to build negative pairs")
        pairs: list[Pair] = []
        qs = self.questions
        for i in range(len(qs)):
            group = self.members[self.faq_of[i]]
            if len(group) > 1:
                for _ in range(self.positives):
                    j = i
                    while j == i:
                        j = rng.choice(group)
                    pairs.append(Pair(qs[i], qs[j], 1))
            for _ in range(self.random_negatives):
                j = self._random_other(i, rng)
                if j >= 0:
                    pairs.append(Pair(qs[i], qs[j], 0))
            for _ in range(self.hard_negatives):
                j = self._hard_other(i, rng)
                if j >= 0:
                    pairs.append(Pair(qs[i], qs[j], 0))
        rng.shuffle(pairs)
        return pairs


def build_intent_classes(groups: dict[str, list[str]], pairs: Iterable[Pair] = ()) -> IntentClasses:
    """The paraphrase graph over the KB (variants of a FAQ are paraphrases) plus labelled pairs."""
    graph = ParaphraseGraph()
    for qs in groups.values():
        graph.add_group(qs)
    graph.add_pairs(pairs)
    return intent_classes(graph)


def split_pairs(pairs: Sequence[Pair], holdout: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """Seeded (train, held-out) split of labelled pairs; held-out size = ceil(holdout * n)."""
    idx = list(range(len(pairs)))
    random.Random(seed).shuffle(idx)
    n_hold = math.ceil(holdout * len(pairs)) if holdout > 0 else 0
    hold = set(idx[:n_hold])
    return [p for i, p in enumerate(pairs) if i not in hold], [pairs[i] for i in sorted(hold)]
