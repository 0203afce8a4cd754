"""Analogy-preserving sentence embeddings for answer selection ("Learning Analogy-Preserving Sentence
Embeddings for Answer Selection", sections 3.2-3.3 and 4).

A question and its correct answer stand in the same relation as other QA pairs of the same kind, so a
candidate a for question q is scored against prototype pairs (q_p, a_p) of q's type by how parallel the
two vector shifts are. Reading order = data flow:

    question_type         "who" / "when" / "where" from the question's first word; None otherwise      3.2
    word representations  texts -> per-text word vectors (len, d), frozen, outside the nn.Module
                          (models/encoders/words.py)
        GloveWords        "glove": GloVe 6B-50d (ours; the paper's fastText is not installable offline)
        MiniLMWords       "minilm" (ours): all-MiniLM-L6-v2's frozen last-layer wordpiece states
    BiGruEncoder          dropout -> BiGRU (hidden per direction) -> max over time   (B,T,d) -> (B,2h)  3.3
    analogy_energy        E = cos(f(q_p) - f(a_p), f(q) - f(a))                      (B,)               (4)-(6)
    contrastive_loss      y (1 - E)^2 + (1 - y) max(E - m, 0)^2                      scalar             (7)-(9)
    QuadrupleSampler      (q_p, a_p, q, a, y) within one type: a = q's correct answer (y = 1) or a wrong
                          candidate of q (y = 0)                                                         3.2
    AnalogyScorer.score   a candidate's score = max over the k prototypes of q's type of E               4.2

`objective="cosine"` is the paper's "BiGRU cosine" baseline (section 4.3, Tan et al. 2015 with a BiGRU):
the same encoder, score = cos(f(q), f(a)), trained on (q, a, y) pairs with the same loss.

The model folder and `load_analogy(folder)` are at the end of this module. Where the paper is silent the
choice is ours; each such `AnalogyConfig` field says so.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from models.calibration import Calibration, read_calibration, write_calibration
from models.encoders.words import WORD_DIMS, GloveWords, MiniLMWords, make_words, pad_states
from models.folder import load_weights, read_model_config, write_json

QUESTION_TYPES = ("who", "when", "where")
OBJECTIVES = ("analogy", "cosine")
FORMAT_VERSION = 1
ARCHITECTURE = "analogy"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WORDS_FILE = "text.json"
PROTOTYPES_FILE = "prototypes.json"


@dataclass
class AnalogyConfig:
    #: "glove" (GloVe 6B-50d; the paper: fastText, frozen) or "minilm" (ours: frozen MiniLM token states)
    word_repr: str = "glove"
    #: BiGRU units per direction; the max-pooled sentence vector is 2 * hidden = 300 wide (paper: 300)
    hidden: int = 150
    #: paper: 0.5 (where it applies is not said; ours: on the word vectors, before the BiGRU)
    dropout: float = 0.5
    #: m of (9); the paper does not give it: chosen on dev (docs/results.md)
    margin: float = 0.0
    #: ours: tokens (glove) or wordpieces (minilm) kept per sentence
    max_len: int = 60
    #: "analogy" (the paper's model) or "cosine" (its "BiGRU cosine" baseline)
    objective: str = "analogy"

    def __post_init__(self) -> None:
        if self.word_repr not in WORD_DIMS:
            raise ValueError(f"AnalogyConfig.word_repr must be one of {', '.join(WORD_DIMS)}, got {self.word_repr!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"AnalogyConfig.objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        for name in ("hidden", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"AnalogyConfig.{name} must be a positive int, got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"AnalogyConfig.dropout must be in [0, 1), got {self.dropout}")
        if not -1.0 <= self.margin < 1.0:
            raise ValueError(f"AnalogyConfig.margin must be in [-1, 1), got {self.margin}")

    @property
    def word_dim(self) -> int:
        return WORD_DIMS[self.word_repr]

    @property
    def dim(self) -> int:
        return 2 * self.hidden

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


# ------------------------------------------------------------------------------------------------
# question types (3.2)


def question_type(question: str) -> str | None:
    """"who", "when" or "where" when the question's first word is that wh-word, else None. The paper
    splits the questions by wh-word; the first word is what reproduces its Table 2 (WikiQA 119 / 86 / 71
    train, 15 / 11 / 17 dev, 34 / 16 / 22 test questions with a correct answer; TrecQA dev and test too).
    A wh-word later in the sentence ("In 1990, who ...") is rarer and mostly a different question kind."""
    words = question.strip().lower().split(maxsplit=1)
    if not words:
        return None
    first = words[0].strip("\"'¿?,.:;")
    return first if first in QUESTION_TYPES else None


# ------------------------------------------------------------------------------------------------
# the network (3.3)


class BiGruEncoder(nn.Module):
    """Word vectors (B,T,d) + bool mask (B,T) -> sentence vectors (B, 2*hidden): BiGRU, max over the real
    time steps (a padded step never wins the max; an empty sentence gives zeros)."""

    def __init__(self, config: AnalogyConfig):
        super().__init__()
        self.config = config
        self.dropout = nn.Dropout(config.dropout)
        self.gru = nn.GRU(config.word_dim, config.hidden, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(dim=1)
        x = self.dropout(x)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.gru(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=x.size(1))  # (B,T,2h)
        h = h.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        pooled = h.max(dim=1).values
        return torch.where(lengths.unsqueeze(1) > 0, pooled, torch.zeros_like(pooled))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def analogy_energy(q_p: torch.Tensor, a_p: torch.Tensor, q: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """E = cos(f(q_p) - f(a_p), f(q) - f(a))   (4)-(6); all (B, D) -> (B,)."""
    return F.cosine_similarity(q_p - a_p, q - a, dim=-1, eps=1e-8)


def contrastive_loss(energy: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """y (1 - E)^2 + (1 - y) max(E - m, 0)^2, averaged   (7)-(9). (9) is printed as max((E - m)^2, 0),
    which is (E - m)^2 always and would push a wrong pair's E towards m from below too; Hadsell et al.'s
    contrastive loss, which the paper cites, penalises only E above m."""
    y = labels.to(energy.dtype)
    return (y * (1.0 - energy) ** 2 + (1.0 - y) * torch.clamp(energy - margin, min=0.0) ** 2).mean()


# ------------------------------------------------------------------------------------------------
# prototypes and quadruples (3.2)


@dataclass(frozen=True)
class Prototype:
    type: str
    question: str
    answer: str


def select_prototypes(lists: Sequence[Any], k: int, seed: int = 0, types: Sequence[str] = QUESTION_TYPES) -> list[Prototype]:
    """Up to k prototypes per type: (question, one of its correct answers) of k distinct questions of the
    type, drawn with `seed`. `lists` are QaList-like (question, candidates, labels); a list's type is
    `question_type(question)`, or its `qtype` attribute when it has one (KB lists)."""
    rng = random.Random(seed)
    out: list[Prototype] = []
    for t in types:
        pool = [l for l in lists if list_type(l) == t and any(l.labels)]
        for l in rng.sample(pool, min(k, len(pool))):
            answer = rng.choice([c for c, y in zip(l.candidates, l.labels) if y])
            out.append(Prototype(t, l.question, answer))
    return out


def list_type(l: Any) -> str | None:
    return getattr(l, "qtype", None) or question_type(l.question)


class QuadrupleSampler:
    """One epoch of (q_p, a_p, q, a, y) quadruples: for each correct answer a+ of each typed question q,
    `per_answer` prototypes of q's type (never q's own pair) each give a positive (q_p, a_p, q, a+, 1) and
    a negative (q_p, a_p, q, a-, 0) with a- a random wrong candidate of q. A question without one gives
    positives only, unless `borrow_negatives` (a KB: every list is a single answer), where a- is a correct
    answer of another question of its type (of another `group`). `objective="cosine"` gives (q, a, y) pairs
    instead (prototype empty)."""

    def __init__(self, lists: Sequence[Any], prototypes: Sequence[Prototype], per_answer: int = 8,
                 objective: str = "analogy", borrow_negatives: bool = False):
        self.lists = [l for l in lists if list_type(l) is not None and any(l.labels)]
        self.by_type: dict[str, list[Prototype]] = {}
        for p in prototypes:
            self.by_type.setdefault(p.type, []).append(p)
        self.per_answer = per_answer
        self.objective = objective
        self.borrow_negatives = borrow_negatives
        self.answers_by_type: dict[str | None, list[tuple[int, str]]] = {}
        for i, l in enumerate(self.lists):
            self.answers_by_type.setdefault(list_type(l), []).extend(
                (i, c) for c, y in zip(l.candidates, l.labels) if y)

    def _wrong(self, i: int, own: list[str], rng: random.Random) -> str | None:
        """A wrong answer for list i: one of its own wrong candidates, else another question's answer."""
        if own:
            return own[rng.randrange(len(own))]
        if not self.borrow_negatives:
            return None
        l = self.lists[i]
        pool = self.answers_by_type.get(list_type(l), [])
        group = getattr(l, "group", None)
        for _ in range(20):
            if not pool:
                break
            j, text = pool[rng.randrange(len(pool))]
            if j != i and text not in l.candidates and (group is None or getattr(self.lists[j], "group", None) != group):
                return text
        return None

    def sample(self, rng: random.Random) -> list[tuple[str, str, str, str, int]]:
        out: list[tuple[str, str, str, str, int]] = []
        for i, l in enumerate(self.lists):
            positives = [c for c, y in zip(l.candidates, l.labels) if y]
            wrong = [c for c, y in zip(l.candidates, l.labels) if not y and c not in positives]
            if self.objective == "cosine":
                for pos in positives:
                    for _ in range(self.per_answer):
                        out.append(("", "", l.question, pos, 1))
                        neg = self._wrong(i, wrong, rng)
                        if neg is not None:
                            out.append(("", "", l.question, neg, 0))
                continue
            protos = [p for p in self.by_type.get(list_type(l), []) if p.question != l.question]
            if not protos:
                continue
            for pos in positives:
                for p in rng.sample(protos, min(self.per_answer, len(protos))):
                    out.append((p.question, p.answer, l.question, pos, 1))
                    neg = self._wrong(i, wrong, rng)
                    if neg is not None:
                        out.append((p.question, p.answer, l.question, neg, 0))
        rng.shuffle(out)
        return out


# ------------------------------------------------------------------------------------------------
# the scorer and its model folder


class AnalogyScorer:
    """An encoder with its word representation and prototypes: texts in, sentence vectors and scores out.
    Word vectors are cached per text (they do not depend on the weights). One call at a time."""

    def __init__(self, encoder: BiGruEncoder, words: GloveWords | MiniLMWords, prototypes: Sequence[Prototype] = (),
                 name: str = "unsaved", device: str | None = None):
        if words.kind != encoder.config.word_repr:
            raise ValueError(f"word_repr={encoder.config.word_repr!r} but the word representation is {words.kind!r}")
        from models.encoders.base import pick_device

        self.device = torch.device(pick_device(device))
        self.encoder = encoder.to(self.device)
        self.words = words
        #: p(answers) = sigmoid(a * score + b), fitted on dev at the end of training (identity until then);
        #: what a re-ranking stage pools with the first stage (app/stages/analogy.py AnalogyStage)
        self.calibration = Calibration()
        self.prototypes = list(prototypes)
        self.name = name
        # word vectors by text: they do not depend on the weights, so scorers over the same texts and word
        # representation may share one (assign it)
        self.word_cache: dict[str, torch.Tensor] = {}

    @property
    def config(self) -> AnalogyConfig:
        return self.encoder.config

    def inputs(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Texts -> (B, T, d) word vectors (zero-padded, T = the longest) and their (B, T) bool mask."""
        todo = sorted({t for t in texts if t not in self.word_cache})
        for start in range(0, len(todo), 128):
            chunk = todo[start:start + 128]
            for text, s in zip(chunk, self.words.states(chunk, self.config.max_len)):
                self.word_cache[text] = s.float()
        x, mask = pad_states([self.word_cache[t] for t in texts], self.words.dim)
        return x.to(self.device), mask.to(self.device)

    def embed(self, texts: Sequence[str], batch_size: int = 256) -> torch.Tensor:
        """(n, 2*hidden) sentence vectors in eval mode (no dropout), on the CPU."""
        was_training = self.encoder.training
        self.encoder.eval()
        out = []
        try:
            with torch.inference_mode():
                for start in range(0, len(texts), batch_size):
                    out.append(self.encoder(*self.inputs(texts[start:start + batch_size])).float().cpu())
        finally:
            self.encoder.train(was_training)
        return torch.cat(out) if out else torch.zeros(0, self.config.dim)

    def score(self, question: str, candidates: Sequence[str]) -> np.ndarray:
        """Each candidate's score: the best E over the prototypes of the question's type (all prototypes
        when the question has no type, or its type none); `objective="cosine"`: cos(f(q), f(a))."""
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float32)
        vectors = self.embed([question] + list(candidates))
        if self.config.objective == "cosine":
            return F.cosine_similarity(vectors[:1], vectors[1:], dim=-1).numpy()
        protos = self.prototypes_for(question)
        if not protos:
            raise ValueError("an analogy model needs prototypes to score with")
        pv = self.embed([p.question for p in protos] + [p.answer for p in protos])
        return best_of_prototypes(pv[: len(protos)], pv[len(protos):], vectors[0], vectors[1:]).numpy()

    def score_lists(self, lists: Sequence[Any], batch_size: int = 256) -> list[np.ndarray]:
        """`score` for many QaList-like lists, every distinct text embedded once."""
        texts = sorted({l.question for l in lists} | {c for l in lists for c in l.candidates}
                       | {t for p in self.prototypes for t in (p.question, p.answer)})
        vectors = self.embed(texts, batch_size)
        row = {t: i for i, t in enumerate(texts)}
        out = []
        for l in lists:
            q = vectors[row[l.question]]
            a = vectors[[row[c] for c in l.candidates]]
            if self.config.objective == "cosine":
                out.append(F.cosine_similarity(q.unsqueeze(0), a, dim=-1).numpy())
                continue
            protos = self.prototypes_for(l.question)
            if not protos:
                raise ValueError("an analogy model needs prototypes to score with")
            q_p = vectors[[row[p.question] for p in protos]]
            a_p = vectors[[row[p.answer] for p in protos]]
            out.append(best_of_prototypes(q_p, a_p, q, a).numpy())
        return out

    def prototypes_for(self, question: str) -> list[Prototype]:
        t = question_type(question) or "any"  # "any": a KB's untyped phrasings (training/analogy.py)
        own = [p for p in self.prototypes if p.type == t]
        return own or list(self.prototypes)

    def probability(self, raw: np.ndarray | Sequence[float]) -> np.ndarray:
        """Calibrated P(the text answers the question) for raw scores."""
        return self.calibration.prob(raw).astype(np.float32)

    def save_calibration(self, directory: str | Path) -> None:
        write_calibration(directory, self.calibration)

    def save(self, directory: str | Path) -> Path:
        """config.json, model.safetensors, text.json (which word vectors: a reference, never the vectors),
        prototypes.json, calibration.json."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in self.encoder.state_dict().items()}
        tmp = directory / (WEIGHTS_FILE + ".tmp")
        save_file(tensors, str(tmp), metadata={"format_version": str(FORMAT_VERSION)})
        os.replace(tmp, directory / WEIGHTS_FILE)
        write_json(directory / CONFIG_FILE, {"format_version": FORMAT_VERSION, "architecture": ARCHITECTURE,
                                              **dataclasses.asdict(self.config)})
        write_json(directory / WORDS_FILE, {"format_version": FORMAT_VERSION, **self.words.meta()})
        write_json(directory / PROTOTYPES_FILE, [dataclasses.asdict(p) for p in self.prototypes])
        self.save_calibration(directory)
        self.name = directory.resolve().name
        return directory


def best_of_prototypes(q_p: torch.Tensor, a_p: torch.Tensor, q: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Prototype vectors q_p, a_p (k, D), a question q (D,) and candidates a (n, D) -> (n,): for each
    candidate the largest E over the k prototypes (4.2: the best prototype, not the mean, which adds the
    noise of the prototypes that do not fit)."""
    shifts_p = F.normalize(q_p - a_p, dim=-1, eps=1e-8)  # (k,D)
    shifts = F.normalize(q.unsqueeze(0) - a, dim=-1, eps=1e-8)  # (n,D)
    return (shifts @ shifts_p.T).max(dim=1).values


def read_config(path: str | Path) -> AnalogyConfig:
    meta = read_model_config(path, FORMAT_VERSION, ARCHITECTURE)
    unknown = sorted(set(meta) - AnalogyConfig.field_names())
    if unknown:
        raise ValueError(f"{path}: unknown AnalogyConfig fields {unknown}")
    return AnalogyConfig(**meta)


def load_analogy(directory: str | Path, device: str | None = None,
                 words: GloveWords | MiniLMWords | None = None) -> AnalogyScorer:
    """A model folder (`faq train analogy`) -> an `AnalogyScorer` in eval mode; `words` reuses an already
    loaded word representation of the same kind."""
    directory = Path(directory)
    config = read_config(directory / CONFIG_FILE)
    weights = directory / WEIGHTS_FILE
    encoder = BiGruEncoder(config)
    load_weights(encoder, weights)
    encoder.eval()
    path = directory / PROTOTYPES_FILE
    prototypes = [Prototype(**p) for p in json.loads(path.read_text(encoding="utf-8"))] if path.exists() else []
    if words is None or words.kind != config.word_repr:
        words = make_words(config.word_repr, device=device or "cpu")
    scorer = AnalogyScorer(encoder, words, prototypes, name=directory.resolve().name, device=device)
    scorer.calibration = read_calibration(directory)
    return scorer

