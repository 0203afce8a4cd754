"""The decision model's trainer (index/decision.py): the model that ships, `index/decision_model.json`.

    faq train decision --cache var/decision --train-models mpnet,minilm --rerank

It reads the candidates `faq eval decision collect` keeps per KB and encoder (pickled
`KbData`), fits the cross-KB logistic regression on all of them (each KB counts the same) and, with
`--recalibrate`, refits the top answer's logit on predictions made leave one KB out, so that the shipped
confidence is the one measured on unseen KBs. `evaluation/decision.py` measures the same training leave
one KB out.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from index.decision import (
    FEATURES, MODEL_FILE, WINDOW, Candidate, DecisionModel, Reference, features, fit,
)
from models.scoring import clipped_logit, fit_weighted_platt

REALISTIC = ("energy", "council", "grocery", "campus_it")
ALL_KBS = REALISTIC + ("demo", "clinc150", "banking77")
L2 = 1.0


@dataclass
class KbData:
    name: str
    encoder: str
    pool: int
    weight: float
    reference: Reference
    queries: list[tuple[str, list[Candidate], str | None, str, float]]  # text, candidates, gold, split, platt top score
    replay: list[tuple[str, list[Candidate], str | None]]  # held-out phrasings (own FAQ) and background (None)


def cache_path(cache: Path, name: str, model: str) -> Path:
    return cache / f"{name}.{model}.pkl"


#: the modules older caches name `KbData` by: collection run as `faq eval decision` (`__main__`),
#: or imported from there before the class moved here
_KBDATA_MODULES = ("__main__", "evaluation.decision")


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return KbData if module in _KBDATA_MODULES and name == "KbData" else super().find_class(module, name)


def load_kbs(cache: Path, names: Sequence[str], model: str) -> list[KbData]:
    out = []
    for name in names:
        p = cache_path(cache, name, model)
        if p.is_file():
            out.append(_Unpickler(p.open("rb")).load())
        else:
            print(f"skipped {name}: {p} not collected", file=sys.stderr)
    return out


def design(kbs: Sequence[KbData], splits: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidate rows of every query: X, y (the candidate is the query's FAQ), weight (each KB counts the same)."""
    Xs, ys, ws = [], [], []
    for kb in kbs:
        rows = [q for q in kb.queries if splits is None or q[3] in splits]
        for text, cands, gold, _, _ in rows:
            head = cands[:WINDOW]
            if not head:
                continue
            Xs.append(features(text, head, kb.reference))
            ys.append(np.array([c.faq_id == gold for c in head], dtype=np.float64))
            ws.append(np.full(len(head), 1.0 / max(len(rows), 1)))
    return np.vstack(Xs), np.concatenate(ys), np.concatenate(ws)


def top_of(model: DecisionModel | None, text: str, cands: list[Candidate], ref: Reference) -> tuple[list[str], np.ndarray]:
    """(faq_ids best first, their probabilities) after the model (None: first-stage order, no probabilities)."""
    head = cands[:WINDOW]
    if model is None or not head:
        return [c.faq_id for c in head], np.zeros(len(head))
    p = model.prob(features(text, head, ref))
    order = np.argsort(-p, kind="stable") if model.rerank else np.arange(len(head))
    return [head[i].faq_id for i in order], p[order]


def train_model(kbs: Sequence[KbData], rerank: bool, meta: dict | None = None, recalibrate: bool = False) -> DecisionModel:
    """Fit on `kbs`; with `recalibrate`, then fit the top answer's logit on predictions cross-fitted leave
    one KB out within `kbs` (each KB counts the same), so the shipped confidence is the unseen-KB one."""
    X, y, w = design(kbs)
    model = fit(X, y, l2=L2, sample_weight=w, rerank=rerank, meta=meta)
    if recalibrate and len(kbs) >= 3:
        zs, rights, weights = [], [], []
        for kb in kbs:
            Xi, yi, wi = design([k for k in kbs if k.name != kb.name])
            inner = fit(Xi, yi, l2=L2, sample_weight=wi, rerank=rerank)
            for text, cands, gold, _, _ in kb.queries:
                ids, p = top_of(inner, text, cands, kb.reference)
                if len(p):
                    zs.append(clipped_logit(float(p[0]), eps=1e-9))
                    rights.append(float(ids[0] == gold))
                    weights.append(1.0 / len(kb.queries))
        model.recalibration = fit_weighted_platt(np.array(zs), np.array(rights), np.array(weights))
        model.meta["recalibration"] = "logit of the top answer, fitted on leave-one-KB-out predictions"
    return model


def add_data_options(p: argparse.ArgumentParser) -> None:
    """The options naming what the model is trained on (the cache, its KBs and encoders, the model's kind) of
    `faq eval decision loko / labels / train` and of `faq train decision`."""
    p.add_argument("--cache", default="var/decision")
    p.add_argument("--kbs", default=",".join(ALL_KBS))
    p.add_argument("--model", default="mpnet")
    p.add_argument("--rerank", action="store_true", help="order candidates by the model")
    p.add_argument("--clarify-min", type=float, default=0.25)
    p.add_argument("--train-models", default=None, help="encoders whose caches train the model (default --model)")
    p.add_argument("--recalibrate", action="store_true",
                   help="refit the top answer's logit on predictions made leave one KB out")


def add_train_options(p: argparse.ArgumentParser) -> None:
    add_data_options(p)
    p.add_argument("--out", default=str(MODEL_FILE))


def train_decision(args: argparse.Namespace, command: str) -> int:
    """Trains on every KB of the cache and writes the model to `args.out`; `command` is recorded in its
    meta (re-running it reproduces the file)."""
    models = (args.train_models or args.model).split(",")
    kbs = [k for m in models for k in load_kbs(Path(args.cache), args.kbs.split(","), m)]
    model = train_model(kbs, args.rerank, recalibrate=args.recalibrate,
                        meta={"trained_on": sorted({k.name for k in kbs}), "encoders": models,
                              "clarify_min": args.clarify_min, "l2": L2, "command": command})
    model.save(args.out or MODEL_FILE)
    print(json.dumps(dict(zip(FEATURES, model.coef.round(3).tolist())), indent=1))
    return 0
