"""The turn model: how far to trust the previous turn when a second message is matched.

"How long does that take?" after the refund FAQ means the refund timing; "do I lose my points" after the
account-deletion FAQ is that FAQ clarified; "can I get it without bags" after a sign-in question is a new
topic. The model scores each candidate FAQ of such a turn with a logistic regression over what the query
alone says of it (the decision model's probability, the query's cosine with its answer), how near it is to
the previous FAQ (the cosine of their answers, or being that FAQ), and how self-contained the query is (the
best probability it reaches alone, its length, pronouns and openers such as "and" or "what about"). It is
fitted on labelled second turns (`faq eval turns fit`), so the weight of the previous turn is
learnt, interacting with how weak the query is alone, never a fixed boost; its output is a probability like
the decision model's.

The candidates are the query's own, the FAQs nearest the previous one, and the previous FAQ itself.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

MODEL_FILE = Path(__file__).resolve().parent / "turn_model.json"
FORMAT = "faq-turn-model/1"
#: FAQs nearest the previous one (by their answers) that are candidates besides the query's own
NEAR_PREVIOUS = 8
#: what `candidates` reads of each candidate (the model's inputs are derived from them: DESIGN)
FEATURES = ("alone", "answer_cos", "prev_sim", "is_prev", "top_alone", "short", "pronoun", "opener", "prompted")

_WORDS = re.compile(r"[a-z0-9']+")
PRONOUNS = frozenset({"it", "its", "it's", "that", "this", "they", "them", "those", "these", "there", "one", "ones",
                      "he", "she", "his", "her", "same", "then", "else"})
OPENERS = frozenset({"and", "also", "but", "so", "or", "plus", "what", "how", "ok", "okay", "then"})


def query_cues(query: str) -> tuple[float, float, float]:
    """(short, pronoun, opener): at most five words; a word pointing back; an opener that continues
    ("and on weekends?", "what about the yearly plan?")."""
    words = _WORDS.findall(query.lower())
    short = 1.0 if len(words) <= 5 else 0.0
    pronoun = 1.0 if PRONOUNS.intersection(words) else 0.0
    opener = 1.0 if words and (words[0] in ("and", "also", "but", "plus", "or")
                              or " ".join(words[:2]) in ("what about", "how about", "what if", "and if")) else 0.0
    return short, pronoun, opener


@dataclass(frozen=True)
class TurnCandidates:
    faq_ids: list[str]
    x: np.ndarray  # (n, len(FEATURES))


def candidates(query: str, previous: str, alone: Mapping[str, float], faq_ids: Sequence[str],
               answer_cos: np.ndarray, prev_sim: np.ndarray, allowed: frozenset[str] | None = None,
               shut: frozenset[str] = frozenset(), prompted: frozenset[str] = frozenset()) -> TurnCandidates:
    """The candidates of one turn and their features. `alone`: faq_id -> the decision model's probability for
    the query alone (its scored window); `faq_ids` order the rows of `answer_cos` (the query's cosine with each
    FAQ's answer) and `prev_sim` (the previous FAQ's answer's cosine with each); `allowed` (a filter's FAQs)
    and `shut` (context-only FAQs not prompted) limit them; `prompted`: the previous FAQ's follow-ups, which an
    editor linked to it, are candidates too."""
    row_of = {f: i for i, f in enumerate(faq_ids)}
    order = [f for f in alone if f in row_of]
    near = np.argsort(-prev_sim, kind="stable")[: NEAR_PREVIOUS + 1].tolist()
    order += [faq_ids[i] for i in near] + ([previous] if previous in row_of else [])
    order += sorted(f for f in prompted if f in row_of)
    seen, keep = set(), []
    for f in order:
        if f in seen or f in shut or (allowed is not None and f not in allowed):
            continue
        seen.add(f)
        keep.append(f)
    top_alone = max(alone.values(), default=0.0)
    short, pronoun, opener = query_cues(query)
    rows = []
    for f in keep:
        i = row_of[f]
        rows.append([float(alone.get(f, 0.0)), float(answer_cos[i]), float(prev_sim[i]), 1.0 if f == previous else 0.0,
                     top_alone, short, pronoun, opener, 1.0 if f in prompted else 0.0])
    return TurnCandidates(keep, np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES)))


#: the model's inputs, derived from FEATURES: the query's own evidence (log probability, whether the query
#: alone scored it, its answer cosine against the best), nearness to the previous FAQ, being it or one of its
#: follow-ups, and how these interact with a weak or elliptical query
DESIGN = ("log_alone", "in_alone", "answer_cos", "answer_cos_gap", "near_previous", "is_prev", "near_x_weak",
          "prev_x_weak", "prev_x_elliptical", "near_x_elliptical", "log_alone_x_strong", "prev_x_pronoun",
          "prev_x_short", "near_x_pronoun", "prompted", "prompted_x_weak", "prompted_x_elliptical")


def design(x: np.ndarray) -> np.ndarray:
    """FEATURES rows of one turn's candidates -> the model's DESIGN rows."""
    if len(x) == 0:
        return np.zeros((0, len(DESIGN)))
    col = {f: x[:, i] for i, f in enumerate(FEATURES)}
    alone, cos, is_prev = col["alone"], col["answer_cos"], col["is_prev"]
    weak = 1.0 - col["top_alone"]
    elliptical = np.maximum(col["short"], np.maximum(col["pronoun"], col["opener"]))
    near = col["prev_sim"] * (1.0 - is_prev)
    log_alone = np.log(alone + 1e-3)
    return np.stack([log_alone, (alone > 0).astype(float), cos, cos - cos.max(), near, is_prev, near * weak,
                     is_prev * weak, is_prev * elliptical, near * elliptical, log_alone * col["top_alone"],
                     is_prev * col["pronoun"], is_prev * col["short"], near * col["pronoun"], col["prompted"],
                     col["prompted"] * weak, col["prompted"] * elliptical], axis=1)


@dataclass(frozen=True)
class TurnModel:
    """A conditional logit over one turn's candidates with a null choice (none of them is right): candidate
    f gets exp(u_f) / (1 + sum exp(u)), u = design(x) @ coef + intercept, so the probabilities of a turn sum
    to at most 1 and an out-of-scope turn can leave every candidate low."""

    coef: np.ndarray
    intercept: float
    meta: dict

    def prob(self, x: np.ndarray) -> np.ndarray:
        if len(x) == 0:
            return np.zeros(0)
        u = design(x) @ self.coef + self.intercept
        top = max(float(u.max()), 0.0)
        e = np.exp(u - top)
        return e / (np.exp(-top) + e.sum())

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"format": FORMAT, "features": list(FEATURES), "design": list(DESIGN),
                                          "coef": [round(float(c), 6) for c in self.coef],
                                          "intercept": round(float(self.intercept), 6), **self.meta}, indent=1) + "\n")


def load_turn_model(path: str | Path | None = None) -> TurnModel | None:
    """The shipped turn model (or the one at `path`); None when absent."""
    p = Path(path) if path else MODEL_FILE
    return _load(str(p), p.stat().st_mtime_ns) if p.is_file() else None


@lru_cache(maxsize=4)
def _load(path: str, _mtime: int) -> TurnModel:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("format") != FORMAT or data.get("features") != list(FEATURES) or data.get("design") != list(DESIGN):
        raise ValueError(f"{path}: not a {FORMAT} file with features {FEATURES} and design {DESIGN}")
    meta = {k: v for k, v in data.items() if k not in ("format", "features", "design", "coef", "intercept")}
    return TurnModel(np.asarray(data["coef"], dtype=np.float64), float(data["intercept"]), meta)


def first_question(retriever: object, faq_id: str) -> str:
    """The first stored phrasing of `faq_id` in `retriever` (an FAQ the turn model adds to the query's own
    list has no phrasing that matched), kept per retriever."""
    table = retriever.__dict__.get("_first_questions")
    if table is None:
        table = {}
        for _, f, q in getattr(retriever, "delta_rows", ()):  # an edited phrasing is newer than the build's
            table.setdefault(f, q)
        dead = getattr(retriever, "tombstones", None)
        for row, (f, q) in enumerate(zip(getattr(retriever, "build_faq_ids", ()), getattr(retriever, "build_questions", ()))):
            if dead is None or not dead[row]:
                table.setdefault(f, q)
        retriever.__dict__["_first_questions"] = table
    return table.get(faq_id, faq_id)
