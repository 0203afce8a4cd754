"""After an MSEM run: the fusion weight chosen on the --dev queries (`tune_fusion`), and the choice between
the fine-tuned model and the zero-shot base encoder (`select_model`, `selection.json`): a fine-tune is
kept only when it beats the base on labelled user queries."""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from models.encoders.msem.encoder import MsemEncoder
from training.msem.data import TrainData

log = logging.getLogger(__name__)


def retrieval_top1(encode: Any, queries: Sequence[tuple[str, str]], kb: Sequence[tuple[str, str]]) -> float:
    """Share of (query, faq_id) whose nearest KB question (exact cosine) belongs to their FAQ; `encode`
    maps texts to L2-normalised rows (any `Encoder.encode`)."""
    if not queries:
        return float("nan")
    kb_vecs = encode([q for q, _ in kb])
    vecs = encode([q for q, _ in queries])
    nearest = np.empty(len(vecs), dtype=np.int64)
    for start in range(0, len(vecs), 2048):  # chunked exact search
        nearest[start : start + 2048] = np.argmax(vecs[start : start + 2048] @ kb_vecs.T, axis=1)
    return sum(kb[j][1] == f for j, (_, f) in zip(nearest.tolist(), queries)) / len(queries)


SELECTION_FILE = "selection.json"
#: below these, a KB is too thin to fine-tune on, or a comparison too small to trust
MIN_MULTI_PHRASING_FAQS = 10
MIN_SELECTION_QUERIES = 10


#: fusion weights tried on the --dev queries after training (token-state models with fusion only)
FUSION_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def tune_fusion(data: TrainData, out_dir: str | Path, grid: Sequence[float] = FUSION_GRID,
                device: str | None = None, cache_dir: str | Path | None = None) -> dict | None:
    """Choose the model's `minilm_fusion` w (how much of the base's own sentence vector the output
    keeps) on the --dev queries and rewrite config.json with it; returns what was tried, or None when
    the model has no fusion or too few queries. Without --dev the held-out KB phrasings are measured
    for information only and the trained w is kept (they are written like the KB, not like users, and
    w moves the model towards or away from the base). No weight changes: the fused vector is
    [sqrt(1-w)·û ; sqrt(w)·m̂], so one encode at the trained w gives every w's cosines."""
    out = Path(out_dir)
    encoder = MsemEncoder.load(out, device=device, cache_dir=cache_dir)
    cfg = encoder.config
    what, queries, kb = selection_queries(data)
    if not cfg.uses_token_states or cfg.minilm_fusion <= 0 or len(queries) < MIN_SELECTION_QUERIES or not grid:
        return None
    vecs = encoder.encode([q for q, _ in kb] + [q for q, _ in queries])
    w0, n = cfg.minilm_fusion, len(kb)
    u = vecs[:, : cfg.u_dim] / math.sqrt(1 - w0)  # û, (n + q, u_dim)
    m = vecs[:, cfg.u_dim:] / math.sqrt(w0)  # m̂, (n + q, token_dim)
    cos_u, cos_m = u[n:] @ u[:n].T, m[n:] @ m[:n].T  # (q, n) each
    faq_of = np.array([f for _, f in kb])
    gold = np.array([f for _, f in queries])
    scores = {float(w): float(np.mean(faq_of[np.argmax((1 - w) * cos_u + w * cos_m, axis=1)] == gold))
              for w in sorted({*grid, w0})}
    applied = data.dev_queries is not None
    best = max(scores, key=lambda w: (scores[w], -abs(w - w0))) if applied else w0  # ties: the trained weight
    if best != w0:
        config_path = out / "config.json"
        meta = json.loads(config_path.read_text(encoding="utf-8"))
        meta["minilm_fusion"] = best
        config_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    log.info("fusion weight on %d %s: %s -> w = %s (trained with %s%s)", len(queries), what,
             ", ".join(f"{w:g}: {v:.4f}" for w, v in scores.items()), best, w0,
             "" if applied else "; kept: no --dev, held-out KB phrasings do not decide")
    record = {"queries": what, "top1_by_w": {f"{w:g}": round(v, 4) for w, v in scores.items()},
              "trained_w": w0, "chosen_w": best}
    if not applied:
        record["reason"] = (f"trained w kept: {what} are written like the KB, not like users, so without "
                            f"labelled user queries (--dev) they do not choose the weight")
    return record


def thin_kb_reason(groups: Mapping[str, Sequence[str]]) -> str | None:
    """Why a KB is too thin to fine-tune on (paraphrase training needs FAQs with 2+ phrasings), or None."""
    multi = sum(len(qs) >= 2 for qs in groups.values())
    if multi < MIN_MULTI_PHRASING_FAQS:
        return (f"only {multi} of {len(groups)} FAQs have 2 or more phrasings (at least {MIN_MULTI_PHRASING_FAQS} "
                f"are needed to learn from paraphrases)")
    return None


def selection_queries(data: TrainData) -> tuple[str, list[tuple[str, str]], list[tuple[str, str]]]:
    """(what they are, queries, KB they are matched against): the in-scope --dev queries, else the KB
    questions held out of training (measured for information only), against the questions the model
    trained on."""
    kb = data.dev_kb if data.dev_kb is not None else [(q, f) for f, qs in data.groups.items() for q in qs]
    if data.dev_queries is not None:
        return "dev queries", [(q, f) for q, f in data.dev_queries if f is not None], kb
    return "held-out KB phrasings", list(data.held_out), kb


def no_dev_reason(baseline: str) -> str:
    """Why a fine-tune is not kept without --dev (the held-out numbers never decide)."""
    return (f"held-out KB phrasings are written like the KB, not like users, so without labelled user queries "
            f"(--dev) the zero-shot {baseline} is kept")


def select_model(data: TrainData, out_dir: str | Path, baseline: str, device: str | None = None,
                 thin_reason: str | None = None, tuned_top1: float | None = None,
                 cache_dir: str | Path | None = None) -> dict:
    """Compare the trained model in `out_dir` with the zero-shot `baseline` encoder on the same labelled
    user queries (--dev); write and return `selection.json` {kept: "fine-tuned" | "base", encoder: the spec
    to serve, ...}. Only --dev queries decide: without them the base is kept, and both models' top-1 on the
    held-out KB phrasings is recorded for information (phrasings written like the KB flattered a fine-tune
    that was worse on real user queries). `tuned_top1`: the model's top-1 on those queries when training
    already measured it (it is then not encoded again). `cache_dir`: the model cache both loads use."""
    from models.encoders.load import load_encoder

    out = Path(out_dir)
    what, queries, kb = selection_queries(data)
    decides = data.dev_queries is not None
    record: dict[str, Any] = {"baseline": baseline, "queries": what, "n_queries": len(queries)}
    if thin_reason is not None:
        record |= {"kept": "base", "reason": f"the KB is too thin to fine-tune on: {thin_reason}"}
    elif len(queries) < MIN_SELECTION_QUERIES:
        record |= {"kept": "base", "reason": no_dev_reason(baseline) if not decides else (
            f"only {len(queries)} in-scope {what} to compare on (at least {MIN_SELECTION_QUERIES} needed): "
            f"without a measurement the base is kept; label more user queries for --dev")}
    else:
        base_top1 = retrieval_top1(load_encoder(baseline, device=device, cache_dir=cache_dir).encode, queries, kb)
        if tuned_top1 is None:
            tuned_top1 = retrieval_top1(MsemEncoder.load(out, device=device, cache_dir=cache_dir).encode, queries, kb)
        better = tuned_top1 > base_top1
        measured = (f"top-1 on {len(queries)} {what}: fine-tuned {tuned_top1:.4f} "
                    f"{'>' if better else '<='} zero-shot {baseline} {base_top1:.4f}")
        record |= {
            "metric": "top1", "fine_tuned": round(tuned_top1, 4), "base": round(base_top1, 4),
            "kept": "fine-tuned" if better and decides else "base",
            "reason": measured if decides else f"{no_dev_reason(baseline)} ({measured}, for information only)",
        }
    record["encoder"] = str(out) if record["kept"] == "fine-tuned" else baseline
    out.mkdir(parents=True, exist_ok=True)
    (out / SELECTION_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def read_selection(model_dir: str | Path) -> dict | None:
    path = Path(model_dir) / SELECTION_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
