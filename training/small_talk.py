"""`faq train smalltalk`: fit the small-talk detector (models/small_talk/detector.py) from labelled small talk
and from requests that must not be taken for it.

The requests are KB questions and queries in users' words, public intent sets' in-scope utterances, and the
same requests wrapped in small talk ("hi, " + request, request + " thanks"), which teach the detector that a
greeting in front of a question does not make the message small talk. A softmax regression over sparse
features fits in seconds on a CPU, so this is one function rather than an epoch trainer.
"""
from __future__ import annotations

import json
import logging
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy import sparse

from models.small_talk.detector import NONE, SmallTalkDetector, Vocabulary, features, tokens
from training.loop import TrainError

log = logging.getLogger(__name__)

#: CLINC150 intents that are one of the service's small-talk kinds; its other chit-chat intents (jokes,
#: hobbies, "what is your name") are none of them and are left out rather than called requests
CLINC_KINDS = {"greeting": "greeting", "goodbye": "goodbye", "thank_you": "thanks", "are_you_a_bot": "bot_identity",
               "what_can_i_ask_you": "help"}
CLINC_SMALL_TALK = set(CLINC_KINDS) | {
    "what_is_your_name", "who_made_you", "how_old_are_you", "what_are_your_hobbies", "do_you_have_pets",
    "where_are_you_from", "who_do_you_work_for", "meaning_of_life", "tell_joke", "fun_fact", "yes", "no", "maybe",
    "repeat", "cancel", "change_ai_name", "change_user_name", "user_name", "flip_coin", "roll_dice"}
ASKS_AFTER_YOU = re.compile(r"\b(how|hows|how's|are you|doing|going|okay|ok|up|everything|things)\b")
#: the small talk users wrap a request in; each is put before or after requests as a negative example
WRAPPING_KINDS = ("greeting", "thanks", "how_are_you", "acknowledgement", "goodbye", "complaint")


@dataclass
class SmallTalkConfig:
    seed: int = 13
    steps: int = 300
    lr: float = 0.1
    l2: float = 1e-4
    min_count: int = 2  # a feature seen fewer times in training is dropped
    wrapped: int = 3000  # requests wrapped in small talk, as requests
    fragments: int = 600  # one to three request words, or random letters, as requests
    none_weight: float = 1.0  # the requests' total weight relative to the small talk's
    embedding_scale: float = 10.0  # the encoder's vectors are multiplied by it (their weights' regulariser)

    def validate(self) -> None:
        if self.steps < 1 or self.lr <= 0 or self.l2 < 0 or self.min_count < 1 or self.wrapped < 0:
            raise TrainError("steps, lr and min_count must be positive, l2 and wrapped not negative")


def read_labelled(path: Path) -> list[tuple[str, str]]:
    """A `{"text", "kind"}` JSONL file as (text, kind) pairs."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(r["text"], r["kind"]) for r in rows]


def read_requests(path: Path) -> list[str]:
    """The user texts of a KB file or query set: `question` and `variants` of FAQ lines, `query` of query
    lines (JSONL), or the first column of a CSV with a `text` header (banking77)."""
    if path.suffix == ".csv":
        import csv

        with path.open(encoding="utf-8", newline="") as fh:
            return [row["text"] for row in csv.DictReader(fh) if row.get("text")]
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        for key in ("question", "query", "text"):
            if isinstance(row.get(key), str):
                out.append(row[key])
        out.extend(v for v in row.get("variants") or [] if isinstance(v, str))
    return out


def read_clinc(path: Path, limit: int, rng: random.Random) -> tuple[list[tuple[str, str]], list[str]]:
    """CLINC150 `data_full.json`: its small-talk intents mapped to kinds, and up to `limit` in-scope and
    out-of-scope utterances of the other intents as requests (train and val splits; the test split is left)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    talk, requests = [], []
    for split in ("train", "val", "oos_train", "oos_val"):
        for text, intent in data.get(split, []):
            if intent in CLINC_KINDS:
                kind = CLINC_KINDS[intent]
                if kind == "greeting" and ASKS_AFTER_YOU.search(text):
                    kind = "how_are_you"  # CLINC's greetings include "how's it going": a kind of its own here
                talk.append((text, kind))
            elif intent not in CLINC_SMALL_TALK:
                requests.append(text)
    rng.shuffle(requests)
    return talk, requests[:limit]


def wrap(requests: Sequence[str], talk: Sequence[tuple[str, str]], n: int, rng: random.Random) -> list[str]:
    """`n` requests wrapped in small talk the way users write it: before, after or both, with or without a
    comma, full stop or exclamation mark."""
    openers = [t for t, k in talk if k in WRAPPING_KINDS]
    if not requests or not openers:
        return []
    out = []
    for _ in range(n):
        request, talk_text = rng.choice(requests), rng.choice(openers)
        sep = rng.choice([", ", " ", ". ", "! ", " - "])
        where = rng.random()
        if where < 0.6:
            out.append(talk_text + sep + request)
        elif where < 0.85:
            out.append(request + sep + talk_text)
        else:
            out.append(talk_text + sep + request + sep + rng.choice(openers))
    return out


def fragments(requests: Sequence[str], talk: Sequence[tuple[str, str]], n: int, rng: random.Random) -> list[str]:
    """`n` fragments of requests: one to three of their words that are never small talk ("parking",
    "meter reading", "wind"), or a few random letters ("asdf qwe"). A bot gets such messages, and without
    them the detector would take any short text it has not seen for small talk."""
    known = {t for text, _ in talk for t in tokens(text)}
    words = sorted({t for text in requests for t in tokens(text) if t.isalpha() and t not in known})
    if not words:
        return []
    out = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.7:
            out.append(" ".join(rng.choice(words) for _ in range(rng.choice((1, 1, 2, 3)))))
        elif roll < 0.85:
            out.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz  ") for _ in range(rng.randint(3, 16))).strip() or "x")
        else:  # what users paste: order numbers, links, markup, error text
            a, b = rng.choice(words), rng.choice(words)
            out.append(rng.choice([f"{a} {rng.randint(10, 99999)}", f"https://www.{a}.com/{b}", f"<{a}>{b}</{a}>",
                                   f"{a}@{b}.com", f"error {rng.randint(100, 999)}: {a} {b}", f"#{rng.randint(1, 9999)} {a}",
                                   f"{a}={b}; {b}()", f"'{a}' \"{b}\""]))
    return out


def fit(talk: Sequence[tuple[str, str]], requests: Sequence[str], kinds: Sequence[str],
        cfg: SmallTalkConfig, vectors: np.ndarray | None = None, encoder: str | None = None) -> SmallTalkDetector:
    """The detector: classes `kinds` + `none`; `talk` as their kinds, `requests` as `none`. With `vectors`
    (one row per text of `talk` then `requests`, from the encoder whose id is `encoder`) it reads them too."""
    cfg.validate()
    classes = list(kinds) + [NONE]
    unknown = sorted({k for _, k in talk} - set(kinds))
    if unknown:
        raise TrainError(f"small talk labelled with unknown kinds: {unknown}")
    if not talk or not requests:
        raise TrainError("need both small talk and requests to fit the detector")
    vocab = Vocabulary.of(t for text, _ in talk for t in tokens(text))
    texts = [t for t, _ in talk] + list(requests)
    labels = np.array([classes.index(k) for _, k in talk] + [len(kinds)] * len(requests))
    rows = [features(t, vocab) for t in texts]
    counts = Counter(f for r in rows for f in r)
    names = sorted(f for f, c in counts.items() if c >= cfg.min_count or f == "bias")
    index = {f: i for i, f in enumerate(names)}
    indptr, cols = [0], []
    for r in rows:
        cols.extend(index[f] for f in r if f in index)
        indptr.append(len(cols))
    x = sparse.csr_matrix((np.ones(len(cols), np.float32), cols, indptr), shape=(len(texts), len(names)))
    scale = 0.0
    if vectors is not None:
        if encoder is None or vectors.shape[0] != len(texts):
            raise TrainError(f"need one vector per text ({len(texts)}) and the encoder's id")
        scale = cfg.embedding_scale
        x = sparse.hstack([x, sparse.csr_matrix(np.asarray(vectors, np.float32) * scale)]).tocsr()
    # every class weighs the same in total, and the requests as much as all the small talk together times none_weight
    per_class = np.bincount(labels, minlength=len(classes)).astype(np.float64)
    class_weight = np.where(np.arange(len(classes)) == len(kinds), cfg.none_weight * len(talk) / max(1, per_class[-1]),
                            (len(talk) / len(kinds)) / np.maximum(per_class, 1))
    w_sample = class_weight[labels]
    w_sample /= w_sample.sum()
    y = np.zeros((len(texts), len(classes)))
    y[np.arange(len(texts)), labels] = 1.0
    weights = np.zeros((x.shape[1], len(classes)))
    m, v = np.zeros_like(weights), np.zeros_like(weights)
    xt = x.T.tocsr()
    for step in range(1, cfg.steps + 1):  # Adam on the full batch
        logits = x @ weights
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        grad = xt @ ((p - y) * w_sample[:, None]) + cfg.l2 * weights
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        weights -= cfg.lr * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
        if step % 50 == 0 or step == cfg.steps:
            loss = -float((np.log(p[np.arange(len(texts)), labels] + 1e-12) * w_sample).sum())
            log.info("small talk: step %d/%d, weighted loss %.4f", step, cfg.steps, loss)
    meta = {"trained_on": {"small_talk": len(talk), "requests": len(requests)},
            "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}}
    return SmallTalkDetector(classes, names, weights.astype(np.float32), vocab, meta,
                             encoder=encoder if vectors is not None else None, embedding_scale=scale)


@dataclass
class SmallTalkData:
    talk: list[tuple[str, str]]
    requests: list[str]

    @property
    def texts(self) -> list[str]:
        return [t for t, _ in self.talk] + self.requests


def collect(talk_file: Path, request_files: Sequence[Path], *, clinc: Path | None = None,
            banking: Path | None = None, cfg: SmallTalkConfig | None = None, clinc_requests: int = 3000,
            banking_requests: int = 1500) -> SmallTalkData:
    """The training set: `talk_file`'s small talk (+ CLINC150's small-talk intents), and as requests the
    texts of `request_files` (KB files, query sets), CLINC150's and banking77's utterances, and KB requests
    wrapped in small talk."""
    cfg = cfg or SmallTalkConfig()
    rng = random.Random(cfg.seed)
    talk = read_labelled(talk_file)
    kb_requests = [t for f in request_files for t in read_requests(f)]
    requests = list(kb_requests)
    public: list[str] = []
    if clinc is not None:
        extra_talk, public = read_clinc(clinc, clinc_requests, rng)
        talk = talk + extra_talk
    if banking is not None:
        rows = read_requests(banking)
        rng.shuffle(rows)
        public = public + rows[:banking_requests]
    requests += public
    wrapped_from = kb_requests + public[:1000]
    requests += wrap(wrapped_from, read_labelled(talk_file), cfg.wrapped, rng)
    requests += fragments(requests, talk, cfg.fragments, rng)
    if not kb_requests:
        raise TrainError("no requests read from the KB files")
    log.info("small talk: %d labelled messages, %d requests (%d wrapped in small talk)", len(talk), len(requests),
             cfg.wrapped)
    return SmallTalkData(talk, requests)
