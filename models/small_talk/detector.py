"""The small-talk detector: is a whole message small talk ("hi", "ty!!", "u a real person?"), and of which kind,
or is it a request the help centre should answer ("hi, my order is late")?

A multinomial logistic regression over sparse text features, one class per small-talk kind plus `none`.
It does not use the service's sentence encoder on purpose: it costs tens of microseconds on any encoder
mode, and small talk is a small closed vocabulary where the words themselves are the evidence. What makes
"hi, my order is late" a request is the words that are *not* small talk, so besides word and character
n-grams the features count the tokens outside the small-talk vocabulary the model was trained with (a one-
letter slip of a known word, "thnks", still counts as known).

A detector is a folder: `config.json` (classes, feature names, the small-talk vocabulary) and
`model.safetensors` (the weights, fp16). `training/small_talk.py` fits one; `for_encoder(id)` reads the
shipped one for the served encoder (`detectors/`).
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from models.folder import read_model_config, write_json

FORMAT_VERSION = 1
ARCHITECTURE = "smalltalk"
NONE = "none"  # the class of every message that is not small talk

_REPEATS = re.compile(r"(.)\1{2,}")
_WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


def tokens(text: str) -> list[str]:
    """Lowercase words, apostrophes dropped ("what's" -> "whats"), letters repeated for effect cut to two
    ("thanksss" -> "thankss"), punctuation dropped and each emoji or other symbol a token of its own."""
    text = unicodedata.normalize("NFKC", text).lower().replace("'", "").replace("\u2019", "")
    text = _REPEATS.sub(r"\1\1", text)
    out = []
    for tok in _WORD.findall(text):
        if tok.isalnum() or unicodedata.category(tok) == "So":  # emoji carry tone; punctuation and <, =, $ not
            out.append(tok)
    return out


def _deletions(word: str) -> set[str]:
    return {word[:i] + word[i + 1:] for i in range(len(word))}


@dataclass(frozen=True)
class Vocabulary:
    """The small-talk words a detector was trained with, and their one-deletion neighbours, so that a slip
    ("thnks", "helo", "thansk" is two: not known) is still known while "refund" is not."""

    words: frozenset[str]
    near: frozenset[str]

    @classmethod
    def of(cls, words: Iterable[str]) -> "Vocabulary":
        words = frozenset(words)
        near = set()
        for w in words:
            if len(w) >= 4:
                near |= _deletions(w)
        return cls(words, frozenset(near))

    def knows(self, token: str) -> bool:
        if not token.isalnum() or token in self.words:  # emoji and symbols are tone, never content
            return True
        if not token.isalpha() or len(token) < 4:
            return False
        if token in self.near:  # a letter missing
            return True
        return any(d in self.words or d in self.near for d in _deletions(token))  # one extra, swapped or wrong


def _bucket(n: int, edges: Sequence[int]) -> str:
    for edge in edges:
        if n <= edge:
            return str(edge)
    return f">{edges[-1]}"


def unknown_words(toks: Sequence[str], vocab: Vocabulary) -> int:
    return sum(1 for t in toks if not vocab.knows(t))


#: a message with more words outside the small-talk vocabulary is a request whatever the scores say: no
#: held-out small-talk line has more than two, and the encoder's vectors of text unlike anything trained on
#: (pasted markup, code) can land near a small-talk kind
MAX_UNKNOWN_WORDS = 2


def features(text: str, vocab: Vocabulary) -> list[str]:
    """The feature names of one message (each counted once)."""
    return read_tokens(tokens(text), vocab)[0]


def read_tokens(toks: Sequence[str], vocab: Vocabulary) -> tuple[list[str], int]:
    """(the feature names, the count of words outside the vocabulary) of one message's tokens."""
    feats = {f"w:{t}" for t in toks}
    feats.update(f"b:{a}_{b}" for a, b in zip(toks, toks[1:]))
    for t in toks:
        if t.isalpha():
            padded = f"<{t}>"
            feats.update(f"c:{padded[i:i + 3]}" for i in range(len(padded) - 2))
    unknown = unknown_words(toks, vocab)
    feats.add(f"n:{_bucket(len(toks), (0, 1, 2, 3, 4, 6, 9, 14))}")
    feats.add(f"u:{_bucket(unknown, (0, 1, 2, 3, 5))}")
    feats.add(f"u/n:{_bucket(round(10 * unknown / max(1, len(toks))), (0, 2, 4, 6, 9))}")
    if toks:
        feats.add(f"first:{toks[0]}")
        feats.add(f"last:{toks[-1]}")
    feats.add("bias")
    return sorted(feats), unknown


@dataclass(frozen=True)
class Verdict:
    kind: str | None  # a small-talk kind, or None: a request
    probability: float  # of that kind (of `none` for a request)
    small_talk: float  # 1 - P(none): how sure it is that the message is small talk at all


class SmallTalkDetector:
    """`weights` has one row per feature name, then, when the detector reads an encoder's vectors too, one
    row per dimension of `encoder`'s vectors (each multiplied by `embedding_scale`, which puts the dense
    part on the sparse part's footing for the regulariser)."""

    def __init__(self, classes: Sequence[str], feature_names: Sequence[str], weights: np.ndarray,
                 vocab: Vocabulary, meta: dict | None = None, *, encoder: str | None = None,
                 embedding_scale: float = 0.0) -> None:
        self.classes = tuple(classes)
        self.index = {name: i for i, name in enumerate(feature_names)}
        self.weights = np.asarray(weights, dtype=np.float32)  # (features [+ dim], classes)
        self.vocab = vocab
        self.meta = dict(meta or {})
        self.none = self.classes.index(NONE)
        self.encoder = encoder  # the Encoder.id whose vectors it reads; None: the text alone
        self.embedding_scale = float(embedding_scale)
        self.dim = self.weights.shape[0] - len(self.index)
        if (self.dim > 0) != (encoder is not None):
            raise ValueError("a detector reads an encoder's vectors exactly when it names the encoder")

    def read(self, texts: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """Each text's feature rows and its count of words outside the vocabulary (one tokenisation each)."""
        index, rows, unknown = self.index, [], []
        for text in texts:
            feats, n = read_tokens(tokens(text), self.vocab)
            rows.append([index[f] for f in feats if f in index])
            unknown.append(n)
        return rows, unknown

    def logits(self, texts: Sequence[str], vectors: np.ndarray | None = None,
               rows: list[list[int]] | None = None) -> np.ndarray:
        n_sparse = len(self.index)
        out = np.zeros((len(texts), len(self.classes)), np.float32)
        for i, row in enumerate(rows if rows is not None else self.read(texts)[0]):
            out[i] = self.weights[row].sum(axis=0)
        if self.dim:
            if vectors is None or vectors.shape != (len(texts), self.dim):
                raise ValueError(f"this detector needs the {self.encoder} vectors of the texts ({self.dim} dims)")
            out += (np.asarray(vectors, np.float32) * self.embedding_scale) @ self.weights[n_sparse:]
        return out

    def probabilities(self, texts: Sequence[str], vectors: np.ndarray | None = None,
                      rows: list[list[int]] | None = None) -> np.ndarray:
        """(n, classes) softmax probabilities."""
        logits = self.logits(texts, vectors, rows)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def detect(self, texts: Sequence[str], vectors: np.ndarray | None = None) -> list[Verdict]:
        rows, unknown = self.read(texts)
        out = []
        for n, row in zip(unknown, self.probabilities(texts, vectors, rows)):
            if n > MAX_UNKNOWN_WORDS:
                out.append(Verdict(None, 1.0, 0.0))
                continue
            best = int(np.argmax(row))
            kind = None if best == self.none else self.classes[best]
            out.append(Verdict(kind, float(row[best]), float(1.0 - row[self.none])))
        return out

    # -- the folder ---------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        names = sorted(self.index, key=self.index.get)
        save_file({"weights": self.weights.astype(np.float16)}, str(folder / "model.safetensors"))
        write_json(folder / "config.json", {
            "format_version": FORMAT_VERSION, "architecture": ARCHITECTURE, "classes": list(self.classes),
            "encoder": self.encoder, "embedding_scale": self.embedding_scale, **self.meta,
            "vocabulary": sorted(self.vocab.words), "features": names})

    @classmethod
    def load(cls, folder: str | Path) -> "SmallTalkDetector":
        from safetensors.numpy import load_file

        folder = Path(folder)
        meta = read_model_config(folder / "config.json", FORMAT_VERSION, ARCHITECTURE)
        weights = load_file(str(folder / "model.safetensors"))["weights"]
        classes, names, words = meta.pop("classes"), meta.pop("features"), meta.pop("vocabulary")
        encoder, scale = meta.pop("encoder", None), meta.pop("embedding_scale", 0.0)
        if weights.shape[1] != len(classes) or weights.shape[0] < len(names):
            raise ValueError(f"{folder}: weights {weights.shape} do not fit {len(names)} features x {len(classes)} classes")
        return cls(classes, names, weights, Vocabulary.of(words), meta, encoder=encoder, embedding_scale=scale)


#: the shipped detectors, one folder each: `text` reads the words alone, the others also the vectors of the
#: encoder their folder is named after (an Encoder.id)
SHIPPED = Path(__file__).resolve().parent / "detectors"
TEXT_ONLY = "text"


@lru_cache(maxsize=8)
def for_encoder(encoder_id: str | None) -> SmallTalkDetector:
    """The shipped detector that reads `encoder_id`'s vectors, else the one that reads the text alone;
    each folder read once per process."""
    folder = SHIPPED / encoder_id if encoder_id and encoder_id != TEXT_ONLY and "/" not in encoder_id else None
    if folder is None or not (folder / "config.json").exists():
        folder = SHIPPED / TEXT_ONLY
    return SmallTalkDetector.load(folder)
