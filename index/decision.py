"""The decision model: P(this FAQ is the right answer), learned across KBs, and what a build stores for it.

A cosine means different things on different KBs and encoders: 0.6 is a sure match on a thin realistic
FAQ and an out-of-scope question on a paraphrase-rich intent KB. A Platt curve fitted on the KB's own
phrasings cannot see that, because phrasings are not how users write. This module scores each candidate
FAQ from signals the first stage already has, put on the KB's own scale:

- `score`, `phrasing`, `answer`: the mixed first-stage score and its two parts;
- `gap`: the lead over the best other candidate (negative for the others);
- `bg_norm`, `bg_tail`: where the score falls between what unrelated questions (the background set,
  `index/background/`) and held-out phrasings of the KB itself reach against this build;
- `lexical`: the share of the query's content words found in the FAQ's phrasings and answer;
- `log_phrasings`, `log_query_len`, `is_top`.

A logistic regression over these (a few hundred bytes, `model.json`) is trained on the labelled queries
of several KBs (`faq train decision`, training/decision.py), so a new KB needs no labels. Per build,
`simulate` replays held-out phrasings and the background set through the same features; the model's
probabilities over them give the threshold -> expected precision / answer rate table (`precision_table`)
for any assumed share of out-of-scope traffic.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from index.answers import WEIGHT_GRID
from kb.mining import content_words
from models.scoring import bounded_sigmoid, fit_logistic

HERE = Path(__file__).resolve().parent
MODEL_FILE = HERE / "decision_model.json"
BACKGROUND_FILE = HERE / "background" / "questions.txt"

FEATURES: tuple[str, ...] = ("score", "phrasing", "answer", "gap", "bg_norm", "bg_tail", "lexical",
                             "log_phrasings", "log_query_len", "is_top")
#: candidates per query the model scores (the rest keep their order below them)
WINDOW = 5
#: quantiles of the background's and the held-out phrasings' top scores stored per build
N_QUANTILES = 101
#: held-out phrasings replayed per build (a sample on large KBs)
HELDOUT_SAMPLE = 1000
#: pool sizes a build stores references for (1 = best phrasing, served with answers; 2 = served without)
POOLS = (1, 2)
#: answer weights a build stores references and an expected-precision table for; a served weight uses the
#: nearest (the default, 0.6, is one; the model's inputs move little between neighbouring weights)
REPLAY_WEIGHTS = (0.0, 0.3, 0.6, 0.9)
#: thresholds of the expected-precision table
THRESHOLDS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(1, 20)) + (0.97, 0.99)
#: the out-of-scope share of traffic the table assumes unless told otherwise
DEFAULT_OOS_SHARE = 0.2


# ---------------------------------------------------------------------------------------------
# what a build knows of its own score scale
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reference:
    """Quantiles (0..100 %) of the top score of background questions and of held-out phrasings whose
    top FAQ is their own, for one (pool, answer weight)."""

    background: np.ndarray  # (N_QUANTILES,)
    heldout: np.ndarray  # (N_QUANTILES,)
    n_background: int
    n_heldout: int

    @property
    def span(self) -> float:
        return max(float(self.heldout[50] - self.background[50]), 0.02)

    def norm(self, s: np.ndarray) -> np.ndarray:
        """0 at the background's median top score, 1 at the held-out phrasings'."""
        return (s - self.background[50]) / self.span

    def tail(self, s: np.ndarray) -> np.ndarray:
        """-log10 of the share of background questions whose top score reaches `s` (smoothed)."""
        q = np.linspace(0.0, 1.0, N_QUANTILES)
        below = np.interp(s, self.background, q, left=0.0, right=1.0)
        share = np.clip(1.0 - below, 0.5 / (self.n_background + 1), 1.0)
        return -np.log10(share)

    def to_json(self) -> dict:
        return {"background": [round(float(x), 5) for x in self.background],
                "heldout": [round(float(x), 5) for x in self.heldout],
                "n_background": self.n_background, "n_heldout": self.n_heldout}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Reference":
        return cls(np.asarray(d["background"], dtype=np.float64), np.asarray(d["heldout"], dtype=np.float64),
                   int(d["n_background"]), int(d["n_heldout"]))


def reference_key(pool: int, weight: float) -> str:
    return f"{int(pool)}/{weight:.2f}"


def _nearest(block: Mapping[str, Any], pool: int, weight: float) -> Any:
    """`block[key]` of a served (pool, weight): its own, else the nearest weight's of the same pool."""
    found = block.get(reference_key(pool, weight))
    if found is not None:
        return found
    near = [k for k in block if k.split("/")[0] == str(int(pool))]
    return block[min(near, key=lambda k: abs(float(k.split("/")[1]) - weight))] if near else None


def reference_for(manifest: Mapping[str, Any] | None, pool: int, weight: float) -> Reference | None:
    """The build's reference for a served (pool, answer weight), None for builds without one."""
    found = _nearest(((manifest or {}).get("decision") or {}).get("references") or {}, pool, weight)
    return Reference.from_json(found) if isinstance(found, dict) else None


# ---------------------------------------------------------------------------------------------
# features
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """What the first stage knows of one candidate FAQ."""

    faq_id: str
    score: float  # mixed first-stage score
    phrasing: float  # pooled phrasing cosine
    answer: float | None  # answer cosine, None when the build has no answer for it
    n_phrasings: int
    words: frozenset[str]  # content words of its phrasings and answer


@lru_cache(maxsize=65536)
def words_of(text: str, language: str = "en") -> frozenset[str]:
    """Content words with a light stem (plural -s, -ing, -ed), the unit the lexical overlap counts. Another
    language's: its stop words dropped, accents folded and its Snowball stem (index/lexical.py
    `content_analyzer`), so a question typed without accents still meets the KB's words."""
    if language != "en":
        from index.lexical import content_analyzer

        return frozenset(w for w in content_analyzer(language).analyze(text) if not w.isdigit())
    return frozenset(_stem(w) for w in content_words(text))


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def features(query: str, candidates: Sequence[Candidate], ref: Reference, language: str = "en") -> np.ndarray:
    """(len(candidates), len(FEATURES)) float64, candidates in first-stage order; the query's words read in
    `language`, as the candidates' were."""
    n = len(candidates)
    X = np.zeros((n, len(FEATURES)), dtype=np.float64)
    if n == 0:
        return X
    qwords = words_of(query, language)
    s = np.array([c.score for c in candidates], dtype=np.float64)
    top2 = np.sort(s)[::-1][:2]
    other = np.where(s == top2[0], top2[1] if n > 1 else ref.background[50], top2[0])
    if n > 1 and np.sum(s == top2[0]) > 1:  # a tie at the top: no lead for either
        other = np.where(s == top2[0], top2[0], other)
    X[:, 0] = s
    X[:, 1] = [c.phrasing for c in candidates]
    X[:, 2] = [c.phrasing if c.answer is None else c.answer for c in candidates]
    X[:, 3] = s - other
    X[:, 4] = ref.norm(s)
    X[:, 5] = ref.tail(s)
    X[:, 6] = [len(qwords & c.words) / len(qwords) if qwords else 0.0 for c in candidates]
    X[:, 7] = [math.log1p(c.n_phrasings) for c in candidates]
    X[:, 8] = math.log1p(len(query.split()))
    X[:, 9] = (np.arange(n) == int(np.argmax(s))).astype(np.float64)
    return X


# ---------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------
@dataclass
class DecisionModel:
    """Standardised logistic regression over `features`; `rerank`: order candidates by it (measured)."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    names: tuple[str, ...] = FEATURES
    rerank: bool = False
    meta: dict = field(default_factory=dict)
    #: (a, b): logit p -> a * logit p + b, fitted on the model's predictions for KBs it was not trained
    #: on, so that its confidence on a new KB is what it was on unseen KBs, not on its training KBs
    recalibration: tuple[float, float] = (1.0, 0.0)

    def prob(self, X: np.ndarray) -> np.ndarray:
        z = ((X - self.mean) / self.scale) @ self.coef + self.intercept
        a, b = self.recalibration
        return bounded_sigmoid(a * z + b)

    def to_json(self) -> dict:
        return {"features": list(self.names), "mean": self.mean.round(6).tolist(),
                "scale": self.scale.round(6).tolist(), "coef": self.coef.round(6).tolist(),
                "intercept": round(float(self.intercept), 6), "rerank": self.rerank,
                "recalibration": [round(float(x), 6) for x in self.recalibration], "meta": self.meta}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DecisionModel":
        names = tuple(d["features"])
        if names != FEATURES:
            raise ValueError(f"decision model features {names} are not this version's {FEATURES}")
        return cls(np.asarray(d["mean"], dtype=np.float64), np.asarray(d["scale"], dtype=np.float64),
                   np.asarray(d["coef"], dtype=np.float64), float(d["intercept"]), names,
                   bool(d.get("rerank", False)), dict(d.get("meta") or {}),
                   tuple(float(x) for x in d.get("recalibration", (1.0, 0.0))))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")


def fit(X: np.ndarray, y: np.ndarray, l2: float = 1.0, sample_weight: np.ndarray | None = None,
        rerank: bool = False, meta: dict | None = None) -> DecisionModel:
    """L2-regularised logistic regression on standardised features (intercept free)."""
    X = np.asarray(X, dtype=np.float64)
    w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale < 1e-9] = 1.0
    v = fit_logistic((X - mean) / scale, y, l2, np.zeros(X.shape[1] + 1), weight=w * (len(y) / w.sum()))
    return DecisionModel(mean, scale, v[:-1], float(v[-1]), FEATURES, rerank, dict(meta or {}))


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int) -> DecisionModel:
    return DecisionModel.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def load_model(path: str | Path | None = None) -> DecisionModel | None:
    """The shipped cross-KB model (or the one at `path`, re-read when the file changes); None when absent."""
    p = Path(path) if path else MODEL_FILE
    return _load(str(p), p.stat().st_mtime_ns) if p.is_file() else None


def decide(model: DecisionModel, query: str, candidates: Sequence[Candidate], ref: Reference,
           language: str = "en") -> np.ndarray:
    """P(right answer) for each of the first `WINDOW` candidates (float64)."""
    head = list(candidates[:WINDOW])
    return model.prob(features(query, head, ref, language)) if head else np.zeros(0)


# ---------------------------------------------------------------------------------------------
# per build: references, replayed queries and the expected-precision table
# ---------------------------------------------------------------------------------------------
_BACKGROUND_VECTORS: dict[tuple[str, int], np.ndarray] = {}


def background_vectors(encoder: Any, texts: Sequence[str], encode: Any) -> np.ndarray:
    """The background questions' vectors, encoded once per encoder and process (`encode(texts)`)."""
    key = (str(getattr(encoder, "id", id(encoder))), len(texts))
    if key not in _BACKGROUND_VECTORS:
        _BACKGROUND_VECTORS[key] = np.asarray(encode(list(texts)), dtype=np.float32)
    return _BACKGROUND_VECTORS[key]


def read_background(path: str | Path | None = None) -> list[str]:
    p = Path(path) if path else BACKGROUND_FILE
    return [line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class KbView:
    """A build's KB as exact matrices: phrasing vectors grouped by FAQ, answer vectors, word sets."""

    vectors: np.ndarray  # (n_phrasings, dim) unit
    faq_of: np.ndarray  # (n_phrasings,) int FAQ index
    faq_ids: list[str]
    answers: np.ndarray | None  # (n_faqs, dim) unit, rows with no answer are zero
    has_answer: np.ndarray  # (n_faqs,) bool
    questions: list[str]
    answer_texts: list[str | None]
    # balanced mode: replayed phrasings are queries, so they are encoded as queries are (texts -> (n, dim));
    # None: the phrasing vectors themselves (one encoder for both sides)
    query_encode: Callable[[list[str]], np.ndarray] | None = None

    @classmethod
    def build(cls, vectors: np.ndarray, variant_faq_ids: Sequence[str], questions: Sequence[str],
              answer_vectors: Any = None, answers: Mapping[str, str] | None = None) -> "KbView":
        faq_ids = list(dict.fromkeys(variant_faq_ids))
        row = {f: i for i, f in enumerate(faq_ids)}
        faq_of = np.array([row[f] for f in variant_faq_ids], dtype=np.int64)
        ans = None
        has = np.zeros(len(faq_ids), dtype=bool)
        if answer_vectors is not None and len(answer_vectors):
            ans = np.zeros((len(faq_ids), vectors.shape[1]), dtype=np.float32)
            for f, i in answer_vectors.row_of.items():
                if f in row:
                    ans[row[f]] = answer_vectors.vectors[i]
                    has[row[f]] = True
        texts = [(answers or {}).get(f) if has[i] else None for i, f in enumerate(faq_ids)]
        return cls(np.asarray(vectors, dtype=np.float32), faq_of, faq_ids, ans, has, list(questions), texts)

    def segments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(phrasing rows grouped by FAQ, each FAQ's first position in that order, its phrasing count)."""
        order = np.argsort(self.faq_of, kind="stable")
        sizes = np.bincount(self.faq_of, minlength=len(self.faq_ids))
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        return order, starts, sizes


def _first_stage(view: KbView, qvecs: np.ndarray, exclude: np.ndarray | None, pool: int,
                 weights: Sequence[float]) -> dict[float, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Exact first stage for query vectors: per weight, (mixed, phrasing, answer) scores (q, n_faqs) float32;
    -inf where a FAQ has no phrasing left (`exclude[i]` = the phrasing row query i is, or -1)."""
    cos = qvecs @ view.vectors.T  # (q, n_phrasings)
    if exclude is not None:
        rows = np.nonzero(exclude >= 0)[0]
        cos[rows, exclude[rows]] = -np.inf
    order, starts, sizes = view.segments()
    vals = cos[:, order]  # phrasings grouped by FAQ: per-FAQ maxima are one reduceat each
    total = np.zeros((len(qvecs), len(starts)), dtype=np.float32)
    found = np.zeros((len(qvecs), len(starts)), dtype=np.int32)
    for k in range(max(1, pool)):  # the k-th best phrasing of each FAQ, for the mean of the best `pool`
        top = np.maximum.reduceat(vals, starts, axis=1)
        ok = np.isfinite(top)
        total += np.where(ok, top, 0.0)
        found += ok
        if k + 1 < pool:
            vals = np.where(vals >= np.repeat(top, sizes, axis=1), -np.inf, vals)
    phr = np.where(found > 0, total / np.maximum(found, 1), -np.inf).astype(np.float32)
    ans = qvecs @ view.answers.T if view.answers is not None else None
    out = {}
    for w in weights:
        if ans is None or w <= 0:
            out[w] = (phr, phr, ans)
        else:
            out[w] = (np.where(view.has_answer[None, :], (1 - w) * phr + w * ans, phr), phr, ans)
    return out


def _quantiles(x: np.ndarray) -> np.ndarray:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return np.zeros(N_QUANTILES)
    return np.quantile(x, np.linspace(0.0, 1.0, N_QUANTILES))


@dataclass
class Replay:
    """Per (pool, weight): the reference and the candidate lists of replayed held-out phrasings and
    background questions (query text, candidates, own FAQ or None)."""

    references: dict[str, Reference]
    queries: dict[str, list[tuple[str, list[Candidate], str | None]]]


#: replayed queries scored per matrix product (bounds the memory of a large KB's build: CHUNK x FAQs)
CHUNK = 128


def replay(view: KbView, bg_texts: Sequence[str], bg_vecs: np.ndarray, pools: Sequence[int] = POOLS,
           weights: Sequence[float] | None = None, sample: int = HELDOUT_SAMPLE, seed: int = 0) -> Replay:
    """Held-out phrasings (each against the KB without itself) and background questions through an
    exact first stage: the reference and the replayed queries' candidates of every (pool, weight)."""
    if weights is None:
        weights = WEIGHT_GRID if view.answers is not None else (0.0,)
    n = len(view.faq_of)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=min(sample, n), replace=False)) if n else np.zeros(0, dtype=np.int64)
    counts = np.bincount(view.faq_of, minlength=len(view.faq_ids))
    rows_of: list[list[int]] = [[] for _ in view.faq_ids]
    for i, f in enumerate(view.faq_of.tolist()):
        rows_of[f].append(i)
    answer_words = [words_of(a) if a else frozenset() for a in view.answer_texts]
    faq_words = [frozenset().union(answer_words[f], *(words_of(view.questions[i]) for i in rows_of[f]))
                 for f in range(len(view.faq_ids))]
    # (text, vector, own FAQ or -1, own phrasing row or -1) of every replayed query, held-out ones first
    texts = [view.questions[r] for r in rows] + list(bg_texts)
    held_vecs = (view.vectors[rows] if view.query_encode is None or not len(rows)
                 else np.asarray(view.query_encode([view.questions[r] for r in rows]), dtype=np.float32))
    vecs = np.concatenate([held_vecs, np.asarray(bg_vecs, dtype=np.float32).reshape(-1, view.vectors.shape[1])])
    owners = np.concatenate([view.faq_of[rows], np.full(len(bg_texts), -1, dtype=np.int64)])
    excl = np.concatenate([rows, np.full(len(bg_texts), -1, dtype=np.int64)])
    n_held = len(rows)
    refs: dict[str, Reference] = {}
    queries: dict[str, list] = {}
    for pool in pools:
        best = {w: np.full(len(texts), -np.inf) for w in weights}
        right = {w: np.zeros(len(texts), dtype=bool) for w in weights}
        out: dict[float, list] = {w: [] for w in weights}
        for start in range(0, len(texts), CHUNK):
            stop = min(start + CHUNK, len(texts))
            scored = _first_stage(view, vecs[start:stop], excl[start:stop], pool, weights)
            for w in weights:
                mixed, phr, ans = scored[w]
                best[w][start:stop] = mixed.max(axis=1)
                right[w][start:stop] = mixed.argmax(axis=1) == owners[start:stop]
                for i in range(stop - start):
                    own, row = int(owners[start + i]), int(excl[start + i])
                    k = min(WINDOW, int(np.isfinite(mixed[i]).sum()))
                    top = np.argpartition(-mixed[i], k - 1)[:k] if k else np.zeros(0, dtype=np.int64)
                    cands = []
                    for f in top[np.argsort(-mixed[i][top], kind="stable")].tolist():
                        mine = f == own
                        words = faq_words[f]
                        if mine:  # its own text is not part of the KB it is matched against
                            words = frozenset().union(answer_words[f],
                                                      *(words_of(view.questions[j]) for j in rows_of[f] if j != row))
                        a = float(ans[i, f]) if ans is not None and view.has_answer[f] else None
                        cands.append(Candidate(view.faq_ids[f], float(mixed[i, f]), float(phr[i, f]), a,
                                               int(counts[f] - mine), words))
                    out[w].append((texts[start + i], cands, view.faq_ids[own] if own >= 0 else None))
        for w in weights:
            key = reference_key(pool, w)
            held_best, held_right = best[w][:n_held], right[w][:n_held]
            refs[key] = Reference(_quantiles(best[w][n_held:]),
                                  _quantiles(held_best[held_right] if held_right.any() else held_best),
                                  int(len(texts) - n_held), int(held_right.sum()))
            queries[key] = out[w]
    return Replay(refs, queries)


def top_probabilities(model: DecisionModel, replayed: Sequence[tuple[str, list[Candidate], str | None]],
                      ref: Reference) -> np.ndarray:
    """The model's probability of the top candidate for each replayed query (after its re-ranking)."""
    out = np.zeros(len(replayed))
    for i, (text, cands, _) in enumerate(replayed):
        p = decide(model, text, cands, ref)
        out[i] = float(p.max()) if len(p) else 0.0
    return out


def precision_table(p_in: np.ndarray, p_out: np.ndarray, oos_share: float = DEFAULT_OOS_SHARE,
                    thresholds: Sequence[float] = THRESHOLDS) -> list[dict]:
    """Threshold -> expected precision and answer rate, traffic assumed to be `oos_share` out of scope:
    the model's probabilities are its own estimate of being right, so the expected precision of the
    answers above t is their mean probability, weighted by the traffic mix."""
    if not 0.0 <= oos_share < 1.0:
        raise ValueError(f"oos_share must be in [0, 1), got {oos_share}")
    rows = []
    for t in thresholds:
        a_in = p_in >= t
        a_out = p_out >= t
        w_in = (1 - oos_share) / max(len(p_in), 1)
        w_out = oos_share / max(len(p_out), 1)
        rate = w_in * a_in.sum() + w_out * a_out.sum()
        right = w_in * p_in[a_in].sum() + w_out * p_out[a_out].sum()
        rows.append({"threshold": float(t), "expected_precision": round(float(right / rate), 4) if rate > 0 else None,
                     "answer_rate": round(float(rate), 4)})
    return rows


#: logged queries of the served build before their own table replaces the replayed one; the latest
#: TRAFFIC_WINDOW of them make it
MIN_TRAFFIC = 200
TRAFFIC_WINDOW = 5000


def traffic_table(scores: Sequence[float], thresholds: Sequence[float] = THRESHOLDS) -> list[dict]:
    """Threshold -> expected precision and answer rate over real traffic, still without labels: the share of
    logged queries whose best score reaches t, and the mean of those scores (the model's own estimate of
    being right). Measured leave-one-KB-out it is nearer the truth than the replayed table on realistic
    FAQs (docs/results.md), because the queries are the users' own."""
    s = np.asarray(scores, dtype=np.float64)
    rows = []
    for t in thresholds:
        a = s >= t
        rows.append({"threshold": float(t), "expected_precision": round(float(s[a].mean()), 4) if a.any() else None,
                     "answer_rate": round(float(a.mean()), 4) if len(s) else 0.0})
    return rows


def threshold_for_precision(table: Sequence[Mapping[str, Any]], target: float) -> float | None:
    """The lowest threshold whose expected precision reaches `target` (None: none does)."""
    for row in table:
        ep = row.get("expected_precision")
        if ep is not None and ep >= target:
            return float(row["threshold"])
    return None


def expected_precision_at(table: Sequence[Mapping[str, Any]], threshold: float) -> float | None:
    """The table's expected precision at the highest tabulated threshold not above `threshold`."""
    best = None
    for row in table:
        if row["threshold"] <= threshold + 1e-9 and row.get("expected_precision") is not None:
            best = row["expected_precision"]
    return best


def build_block(view: KbView, bg_texts: Sequence[str], bg_vecs: np.ndarray, model: DecisionModel | None,
                pools: Sequence[int] = POOLS) -> dict:
    """The `decision` block of a build's manifest: the references of every (pool, answer weight) it may be
    served with and, with a model, the quantiles of its top probabilities over the replayed held-out
    phrasings and background questions (the expected-precision table is made from them for any assumed
    out-of-scope share)."""
    weights = REPLAY_WEIGHTS if view.answers is not None else (0.0,)
    played = replay(view, bg_texts, bg_vecs, pools=pools, weights=weights)
    block: dict[str, Any] = {
        "background": {"n": len(bg_texts)},
        "references": {k: r.to_json() for k, r in played.references.items()},
    }
    if model is not None:
        block["model"] = dict(model.meta)
        block["replay"] = {}
        for key, queries in played.queries.items():
            ref = played.references[key]
            p = top_probabilities(model, queries, ref)
            held = np.array([own is not None for _, _, own in queries], dtype=bool)
            block["replay"][key] = {"p_heldout": [round(float(x), 4) for x in _quantiles(p[held])],
                                    "p_background": [round(float(x), 4) for x in _quantiles(p[~held])],
                                    "n_heldout": int(held.sum()), "n_background": int((~held).sum())}
    return block


def replayed(manifest: Mapping[str, Any] | None, pool: int, weight: float) -> dict | None:
    """A build's replayed top probabilities for a served (pool, weight): its own, else the nearest
    replayed weight's of the same pool; None when the build has none."""
    found = _nearest(((manifest or {}).get("decision") or {}).get("replay") or {}, pool, weight)
    return found if isinstance(found, dict) else None


def served_table(manifest: Mapping[str, Any] | None, pool: int, weight: float,
                 oos_share: float = DEFAULT_OOS_SHARE) -> list[dict] | None:
    """The expected-precision table of a build for a served (pool, weight), None when it has none."""
    found = replayed(manifest, pool, weight)
    if found is None:
        return None
    return precision_table(np.asarray(found["p_heldout"], dtype=np.float64),
                           np.asarray(found["p_background"], dtype=np.float64), oos_share)


# ---------------------------------------------------------------------------------------------
# a KB's own labels
# ---------------------------------------------------------------------------------------------
#: how many labelled queries the cross-KB model weighs as when a KB's own labels refit it: with fewer
#: labels than this it mostly stays, with many more the labels decide (see docs/results.md for the curve)
PRIOR_STRENGTH = 100.0


def refit(prior: DecisionModel, X: np.ndarray, y: np.ndarray, strength: float = PRIOR_STRENGTH,
          meta: dict | None = None) -> DecisionModel:
    """The model refitted on a KB's own labelled candidates (X, y: `features` rows and whether each is the
    query's FAQ), pulled toward `prior` with the weight of `strength` queries: the penalty
    strength * WINDOW / 2 * ||v - v_prior||^2 on the prior's standardised coefficients and intercept."""
    if len(y) == 0:
        raise ValueError("no labelled candidates to refit on")
    Z = (np.asarray(X, dtype=np.float64) - prior.mean) / prior.scale
    a, b = prior.recalibration
    v0 = np.append(prior.coef * a, prior.intercept * a + b)  # fold the recalibration in
    v = fit_logistic(Z, y, float(strength) * WINDOW, v0, centre=v0, intercept_penalised=True)
    return DecisionModel(prior.mean, prior.scale, v[:-1], float(v[-1]), prior.names, prior.rerank,
                         {**prior.meta, **(meta or {})}, (1.0, 0.0))
