"""The peer faq-match is compared with: the recipe people copy for "semantic FAQ search", i.e.
sentence-transformers all-MiniLM-L6-v2 + a FAISS flat inner-product index behind one FastAPI route.

Needs `pip install faiss-cpu` (a bench-only dependency; faq-match itself does not use FAISS).

    python bench/peer.py serve --kb runs/data/clinc150/kb.jsonl --port 8100 [--model minilm] [--threads N]
    python bench/load.py --url http://127.0.0.1:8100 --queries runs/data/clinc150/test.jsonl --concurrency 32

At start-up every phrasing of every FAQ is encoded (`normalize_embeddings=True`, so inner product =
cosine) into `faiss.IndexFlatIP`. `POST /match {query, top_k?, threshold?}` answers in the same shape
as faq-match's /match (the fields bench/load.py reads: `index_version`, `answer`, `matches[].faq_id`,
`timings_ms.{encode,retrieve,rerank,total}`), so one load generator measures both. A FAQ's score is the
raw cosine of its best phrasing; the top FAQ is always the answer unless the request gives a
`threshold` (raw cosine): the recipe has no calibrated probability, and no threshold by default.
`GET /healthz` and `GET /readyz` (what load.py probes) report the KB size and the start-up costs.

It is kept deliberately plain: one uvicorn worker, a sync route (FastAPI runs it in its thread pool,
as its docs advise for blocking calls), torch threads as torch picks them unless `--threads` is given,
no batching, no caching. Making it slower or faster than the recipe would defeat the comparison.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kb.records import group_records  # noqa: E402  (needs REPO on the path)
from kb.files import read_kb  # noqa: E402  (needs REPO on the path)

# texts -> (n, d) float32 rows of unit length
EncodeFn = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Faq:
    faq_id: str
    answer: str
    questions: list[str]


def load_faqs(path: str | Path) -> list[Faq]:
    """The KB file as FAQs, validated and grouped exactly as `faq kb import` does, so both systems
    serve the same phrasings."""
    records = read_kb(path)
    specs, problems = group_records((f"{path}:{i}", rec) for i, rec in enumerate(records, start=1))
    if problems:  # read_kb already rejects these; kept so a bad file never serves half a KB
        raise ValueError("; ".join(f"{loc}: {reason}" for loc, reason in problems))
    return [Faq(s.faq_id, s.answer, list(s.questions)) for s in specs.values()]


class PeerIndex:
    """Every phrasing in one `IndexFlatIP`; a FAQ ranks by its best phrasing's cosine."""

    def __init__(self, faqs: Sequence[Faq], encode: EncodeFn, batch_size: int = 64):
        import faiss  # lazy: compare.py and the tests import this module without needing FAISS

        if not faqs:
            raise ValueError("the KB holds no FAQs")
        self.faqs = list(faqs)
        self.encode = encode
        self.row_faq: list[int] = []  # index row -> position in self.faqs
        self.row_question: list[str] = []
        for i, faq in enumerate(self.faqs):
            for q in faq.questions:
                self.row_faq.append(i)
                self.row_question.append(q)
        self.max_phrasings = max(len(f.questions) for f in self.faqs)

        t0 = time.perf_counter()
        vectors = np.ascontiguousarray(encode(self.row_question), dtype=np.float32)
        self.encode_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(vectors)
        self.index_build_s = time.perf_counter() - t0
        self.dim = int(vectors.shape[1])

    @property
    def n_phrasings(self) -> int:
        return len(self.row_question)

    def search(self, query: str, top_k: int) -> tuple[list[dict], float, float]:
        """(top_k FAQs best first as {faq_id, question, answer, score}, encode ms, search ms)."""
        t0 = time.perf_counter()
        q = np.ascontiguousarray(self.encode([query]), dtype=np.float32)
        t1 = time.perf_counter()
        # The k-th best FAQ's best phrasing is outranked only by phrasings of the k-1 FAQs above it,
        # so top_k * (most phrasings of any FAQ) neighbours always hold the top_k FAQs' best phrasings.
        k = min(self.n_phrasings, top_k * self.max_phrasings)
        scores, rows = self.index.search(q, k)
        t2 = time.perf_counter()
        matches: list[dict] = []
        seen: set[int] = set()
        for score, row in zip(scores[0], rows[0]):
            if row < 0:
                break
            i = self.row_faq[row]
            if i in seen:
                continue
            seen.add(i)
            faq = self.faqs[i]
            matches.append({"faq_id": faq.faq_id, "question": self.row_question[row], "answer": faq.answer,
                            "score": round(float(score), 6)})
            if len(matches) == top_k:
                break
        return matches, (t1 - t0) * 1000.0, (t2 - t1) * 1000.0


def sentence_transformer_encoder(model: str, threads: int | None = None) -> tuple[EncodeFn, str]:
    """(encode function, model name) for `minilm`, `mpnet` or a sentence-transformers folder,
    used the way the recipe does: `model.encode(texts, normalize_embeddings=True)`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    if threads:
        torch.set_num_threads(threads)
    if model == "minilm":
        from models.encoders.pretrained import minilm_path

        path, name = minilm_path(), "all-MiniLM-L6-v2"
    elif model == "mpnet":
        from app.settings import Settings
        from models.encoders.mpnet import mpnet_path

        path, name = mpnet_path(Settings().mpnet_cache), "all-mpnet-base-v2"
    else:
        path, name = model, Path(model).name
    st = SentenceTransformer(path, device="cpu")

    def encode(texts: Sequence[str]) -> np.ndarray:
        return st.encode(list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    return encode, name


class MatchRequest(BaseModel):
    query: str = Field(min_length=1, max_length=1000)
    top_k: int = Field(default=5, ge=1, le=50)
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)  # raw cosine; unset: always answer


def create_app(index: PeerIndex, info: dict):
    """The FastAPI app around a built index; `info` is reported by /healthz and /readyz."""
    from fastapi import FastAPI

    app = FastAPI(title="peer: sentence-transformers + FAISS flat IP")
    version = info["index_version"]

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok", **info}

    @app.get("/readyz")  # the index is built before the server starts listening: up means ready
    def readyz() -> dict:
        return {"ready": True, **info}

    @app.post("/match")
    def match(req: MatchRequest) -> dict:
        t0 = time.perf_counter()
        matches, encode_ms, search_ms = index.search(req.query, req.top_k)
        best = matches[0] if matches else None
        answered = best is not None and (req.threshold is None or best["score"] >= req.threshold)
        return {
            "request_id": uuid.uuid4().hex,
            "query": req.query,
            "arm": "faiss-flat-ip",
            "index_version": version,
            "answer": {k: best[k] for k in ("faq_id", "answer", "score")} if answered else None,
            "matches": matches,
            "timings_ms": {"encode": round(encode_ms, 3), "retrieve": round(search_ms, 3), "rerank": 0.0,
                           "total": round((time.perf_counter() - t0) * 1000.0, 3)},
        }

    return app


def build(kb: str | Path, model: str = "minilm", threads: int | None = None) -> tuple[PeerIndex, dict]:
    t0 = time.perf_counter()
    encode, model_name = sentence_transformer_encoder(model, threads)
    load_s = time.perf_counter() - t0
    faqs = load_faqs(kb)
    index = PeerIndex(faqs, encode)
    import faiss
    import torch

    info = {
        "index_version": f"peer-faiss-flatip-{model_name}-{index.n_phrasings}",
        "model": model_name,
        "n_faqs": len(index.faqs),
        "n_phrasings": index.n_phrasings,
        "dim": index.dim,
        "model_load_s": round(load_s, 3),
        "encode_s": round(index.encode_s, 3),
        "encode_sentences_per_s": round(index.n_phrasings / index.encode_s, 1) if index.encode_s > 0 else None,
        "index_build_s": round(index.index_build_s, 4),
        "torch_threads": torch.get_num_threads(),
        "faiss_version": faiss.__version__,
    }
    return index, info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="encode the KB, build the FAISS index, serve /match")
    s.add_argument("--kb", required=True, help="KB file (.jsonl/.csv, the format of `faq kb import`)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8100)
    s.add_argument("--model", default="minilm", help="minilm (default), mpnet, or a sentence-transformers folder")
    s.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    s.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    args = p.parse_args(argv)

    import uvicorn

    index, info = build(args.kb, args.model, args.threads)
    print(f"peer: {info['n_phrasings']} phrasings of {info['n_faqs']} FAQs encoded in {info['encode_s']}s "
          f"({info['encode_sentences_per_s']} sentences/s, {info['torch_threads']} torch threads); "
          f"serving on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    uvicorn.run(create_app(index, info), host=args.host, port=args.port, workers=1, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
