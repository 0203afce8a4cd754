"""Matching evaluation: pure metric functions and the `faq eval match` runner.

Metrics are over FAQs, not variants (the Matcher already groups variants by faq_id):
- top-1 accuracy, MRR, recall@5: over in-scope queries (gold faq_id not null), from the ranked FAQ list;
- answer precision = correct answers / answered queries (answering an out-of-scope query is wrong);
- answer recall = correct answers / answerable (in-scope) queries; answer F1 their harmonic mean;
- out-of-scope recall = out-of-scope queries left unanswered / out-of-scope queries.

The runner goes through the PRODUCT's own path so the numbers describe what is served: a fresh
`FaqStore` on a SQLite file in a work folder (Alembic migrations, `import_records`),
`index.build.build_index` with the chosen encoder (Annoy + calibration), then `app.matcher.Matcher`
over all queries in batches. The answer threshold is tuned on dev queries (maximising answer F1)
when a dev file is given, else the default threshold from settings is used.
"""
from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

log = logging.getLogger(__name__)

RECALL_K = 5
#: how many FAQs the evaluation asks the matcher for (MRR looks this deep)
EVAL_TOP_K = 10
EVAL_DB_FILE = "eval.db"
EVAL_INDEX_DIR = "indexes"


# ---------------------------------------------------------------------------------------------
# pure metrics


@dataclass(frozen=True)
class QueryOutcome:
    """What the matcher did with one labelled query."""

    gold: str | None  # expected faq_id; None = out of scope (should get no answer)
    ranked: tuple[str, ...]  # faq_ids, best first
    top_score: float | None  # calibrated score of ranked[0] (None when nothing was retrieved)
    answer: str | None  # the faq_id answered, None when the query was left unanswered


def rank_of(gold: str, ranked: Sequence[str]) -> int | None:
    """1-based rank of `gold` in `ranked`, None when absent."""
    for position, faq_id in enumerate(ranked, start=1):
        if faq_id == gold:
            return position
    return None


def _in_scope(outcomes: Sequence[QueryOutcome]) -> list[QueryOutcome]:
    return [o for o in outcomes if o.gold is not None]


def top1_accuracy(outcomes: Sequence[QueryOutcome]) -> float:
    scoped = _in_scope(outcomes)
    return sum(bool(o.ranked) and o.ranked[0] == o.gold for o in scoped) / len(scoped) if scoped else 0.0


def mean_reciprocal_rank(outcomes: Sequence[QueryOutcome]) -> float:
    scoped = _in_scope(outcomes)
    if not scoped:
        return 0.0
    total = 0.0
    for o in scoped:
        r = rank_of(o.gold, o.ranked)
        total += 1.0 / r if r else 0.0
    return total / len(scoped)


def recall_at_k(outcomes: Sequence[QueryOutcome], k: int = RECALL_K) -> float:
    scoped = _in_scope(outcomes)
    return sum(o.gold in o.ranked[:k] for o in scoped) / len(scoped) if scoped else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def answer_metrics(outcomes: Sequence[QueryOutcome]) -> dict[str, float | int]:
    """Precision / recall / F1 of the answer decisions, and out-of-scope recall."""
    answered = [o for o in outcomes if o.answer is not None]
    correct = sum(o.answer == o.gold for o in answered)  # gold None never equals an answer
    answerable = sum(o.gold is not None for o in outcomes)
    oos = [o for o in outcomes if o.gold is None]
    oos_unanswered = sum(o.answer is None for o in oos)
    precision = correct / len(answered) if answered else 0.0
    recall = correct / answerable if answerable else 0.0
    return {
        "answer_precision": precision,
        "answer_recall": recall,
        "answer_f1": _f1(precision, recall),
        "oos_recall": oos_unanswered / len(oos) if oos else None,  # None: no out-of-scope queries
        "n_answered": len(answered),
        "n_correct": correct,
        "n_answerable": answerable,
        "n_oos": len(oos),
        "n_oos_unanswered": oos_unanswered,
    }


def all_metrics(outcomes: Sequence[QueryOutcome], k: int = RECALL_K) -> dict[str, float | int]:
    return {
        "n_queries": len(outcomes),
        "n_in_scope": len(_in_scope(outcomes)),
        "top1_accuracy": top1_accuracy(outcomes),
        "mrr": mean_reciprocal_rank(outcomes),
        f"recall_at_{k}": recall_at_k(outcomes, k),
        **answer_metrics(outcomes),
    }


def apply_threshold(outcomes: Sequence[QueryOutcome], threshold: float) -> list[QueryOutcome]:
    """The same outcomes with the answer decided as the Matcher does: best FAQ iff score >= threshold."""
    return [
        replace(o, answer=o.ranked[0] if o.ranked and o.top_score is not None and o.top_score >= threshold else None)
        for o in outcomes
    ]


def tune_threshold(outcomes: Sequence[QueryOutcome]) -> tuple[float, float]:
    """The threshold maximising answer F1 on `outcomes` -> (threshold, F1).

    Only the order of top scores matters, so the candidates are exact: "answer the m best-scored
    queries" for every m at a change of score. The threshold returned sits midway between the
    lowest answered score and the next lower one (robust to small score shifts on new data); ties in
    F1 go to the higher threshold (fewer wrong answers to out-of-scope queries).
    """
    scored = [o for o in outcomes if o.ranked and o.top_score is not None]
    answerable = sum(o.gold is not None for o in outcomes)
    if not scored or answerable == 0:
        return 1.0, 0.0
    scores = np.array([o.top_score for o in scored], dtype=np.float64)
    correct = np.array([o.ranked[0] == o.gold for o in scored], dtype=np.float64)
    order = np.argsort(-scores, kind="stable")
    scores, correct = scores[order], correct[order]
    n_answered = np.arange(1, len(scores) + 1, dtype=np.float64)
    n_correct = np.cumsum(correct)
    precision = n_correct / n_answered
    recall = n_correct / answerable
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    # a cut is only possible after the last of a run of equal scores
    last_of_tie = np.append(scores[1:] < scores[:-1], True)
    candidates = np.flatnonzero(last_of_tie)
    best_f1 = float(f1[candidates].max())
    best = int(candidates[np.flatnonzero(np.isclose(f1[candidates], best_f1, rtol=0, atol=1e-12))[0]])
    if best_f1 <= 0.0:
        return float(scores[0]) + 1e-6, 0.0  # answering never helps: answer nothing
    lower = scores[best + 1] if best + 1 < len(scores) else None
    threshold = float(scores[best]) if lower is None else float((scores[best] + lower) / 2.0)
    return threshold, best_f1


# ---------------------------------------------------------------------------------------------
# the runner


def outcomes_from_results(results: Sequence[Any], golds: Sequence[str | None]) -> list[QueryOutcome]:
    """Matcher `MatchResult`s + gold labels -> outcomes."""
    out = []
    for result, gold in zip(results, golds):
        ranked = tuple(m.faq_id for m in result.matches)
        top = float(result.matches[0].score) if result.matches else None
        out.append(QueryOutcome(gold, ranked, top, result.answer.faq_id if result.answer is not None else None))
    return out


def match_all(matcher: Any, retriever: Any, queries: Sequence[str], threshold: float, top_k: int,
              batch_size: int, desc: str, arm: str = "ann") -> tuple[list[Any], float]:
    """All queries through `Matcher.match_many` in batches (one pinned retriever, one arm) -> (results, seconds)."""
    from tqdm import tqdm

    from app.matcher import MatchQuery

    results: list[Any] = []
    t = time.perf_counter()
    with tqdm(total=len(queries), unit="q", desc=desc, file=sys.stderr, disable=len(queries) < batch_size) as bar:
        for start in range(0, len(queries), batch_size):
            batch = list(queries[start : start + batch_size])
            results.extend(matcher.match_many([MatchQuery(q, top_k, threshold, arm=arm) for q in batch],
                                              retriever=retriever))
            bar.update(len(batch))
    return results, time.perf_counter() - t


class MemoEncoder:
    """An encoder that remembers the vectors of texts it has encoded (an evaluation matches the same dev
    queries once per tuned setting); everything else is the wrapped encoder's."""

    def __init__(self, encoder: Any):
        self._encoder = encoder
        self._memo: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._encoder, name)

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            vecs = self._encoder.encode(missing, batch_size=batch_size, show_progress_bar=show_progress_bar)
            self._memo.update(zip(missing, np.asarray(vecs, dtype=np.float32)))
        return np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, self._encoder.dim), np.float32)


def tune_pool(matcher: Any, retriever: Any, dev: Sequence[Any], pools: Sequence[int], threshold: float, top_k: int,
              batch_size: int) -> dict:
    """Match the dev queries (`ann` arm) with each pool size; leave `matcher.pool_variants` at the one with
    the best dev answer F1 (then top-1, then the smaller N) and return {chosen, dev_by_pool}."""
    by_pool = {}
    for pool in pools:
        matcher.pool_variants = pool
        results, _ = match_all(matcher, retriever, [q.query for q in dev], threshold, top_k, batch_size, f"dev (pool {pool})")
        outcomes = outcomes_from_results(results, [q.faq_id for q in dev])
        by_pool[pool] = {"dev_f1": tune_threshold(outcomes)[1], "dev_top1": top1_accuracy(outcomes)}
    matcher.pool_variants = max(pools, key=lambda p: (by_pool[p]["dev_f1"], by_pool[p]["dev_top1"], -p))
    return {"chosen": matcher.pool_variants, "dev_by_pool": by_pool}


def keep_first_variants(records: Sequence[Any], n: int) -> list[Any]:
    """Each FAQ's first `n` phrasings (n=1: a KB written with a single question per FAQ)."""
    seen: dict[str, int] = {}
    kept = []
    for r in records:
        seen[r.faq_id] = seen.get(r.faq_id, 0) + 1
        if seen[r.faq_id] <= n:
            kept.append(r)
    return kept


def _known_faq_check(name: str, golds: Sequence[str | None], faq_ids: set[str]) -> None:
    unknown = sorted({g for g in golds if g is not None and g not in faq_ids})
    if unknown:
        raise ValueError(f"{name}: {len(unknown)} faq_id(s) not in the KB, e.g. {unknown[:5]}")


def run_eval_match(
    kb_path: str | Path,
    queries_path: str | Path,
    dev_path: str | Path | None = None,
    model: str | None = None,
    workdir: str | Path | None = None,
    *,
    top_k: int = EVAL_TOP_K,
    batch_size: int = 256,
    progress: bool = True,
    settings: Any = None,
    n_trees: int | None = None,
    search_k: int | None = None,
    variants_per_faq: int | None = None,
    reranker: str | None = None,
    rerank_k: int | None = None,
    rerank_weight: float | None = None,
    tune_rerank_weight: bool = False,
    pool_variants: Sequence[int] | None = None,
) -> dict:
    """Import the KB into a fresh store, build the index, match dev/test queries; returns the report.

    `variants_per_faq`: keep only each FAQ's first N phrasings (N=1: how well a KB written with a single
    question per FAQ matches).
    `reranker`: a re-ranker folder; the queries then run the `ann+rerank` arm (the cross-encoder re-scores
    the top `rerank_k` FAQs, default settings.rerank_k) and the threshold is tuned on its probabilities.
    `pool_variants`: how many of a FAQ's best phrasings its cosine averages (app/matcher.py `group_hits`;
    default settings.pool_variants); several values are each run on dev (`ann` arm, queries encoded once)
    and the one with the best dev answer F1 is used."""
    from app.kb_io import read_kb, read_queries
    from app.matcher import Matcher, calibration_for
    from app.settings import get_settings
    from app.store import FaqStore
    from index.artifacts import BuildRegistry
    from index.build import build_index
    from index.retriever import Retriever
    from models.encoder import load_encoder

    base = settings or get_settings()
    spec = model or base.encoder_spec()
    timings: dict[str, float] = {}
    t_all = time.perf_counter()

    records = read_kb(kb_path)
    if variants_per_faq is not None:
        records = keep_first_variants(records, variants_per_faq)
    queries = read_queries(queries_path)
    dev = read_queries(dev_path) if dev_path else None
    faq_ids = {r.faq_id for r in records}
    _known_faq_check(str(queries_path), [q.faq_id for q in queries], faq_ids)
    if dev is not None:
        _known_faq_check(str(dev_path), [q.faq_id for q in dev], faq_ids)

    own_tmp = workdir is None
    work = Path(tempfile.mkdtemp(prefix="faq-eval-")) if own_tmp else Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    db_file, index_dir = work / EVAL_DB_FILE, work / EVAL_INDEX_DIR
    # a fresh store every run: remove only what a previous run of this command created here
    db_file.unlink(missing_ok=True)
    shutil.rmtree(index_dir, ignore_errors=True)
    update: dict[str, Any] = {"data_dir": work, "database_url": f"sqlite:///{db_file.as_posix()}"}
    if n_trees is not None:
        update["ann_n_trees"] = n_trees
    if search_k is not None:
        update["ann_search_k"] = search_k
    settings_eval = base.model_copy(update=update)
    try:
        t = time.perf_counter()
        store = FaqStore.from_settings(settings_eval)
        import_report = store.import_records(records)
        timings["import_s"] = time.perf_counter() - t

        t = time.perf_counter()
        encoder = load_encoder(spec)
        timings["load_encoder_s"] = time.perf_counter() - t

        t = time.perf_counter()
        registry = BuildRegistry(index_dir)
        manifest = build_index(
            store, encoder, registry, n_trees=settings_eval.ann_n_trees, search_k=settings_eval.ann_search_k,
            batch_size=batch_size, progress=progress,
        )
        timings["index_build_s"] = time.perf_counter() - t
        retriever = Retriever.load(registry.current_dir()).with_kb(store.snapshot(), encoder)
        encoder = MemoEncoder(encoder)  # dev queries are matched more than once when something is tuned on them
        pools = list(pool_variants) if pool_variants else [int(getattr(base, "pool_variants", 1))]
        if len(pools) > 1 and not dev:
            raise ValueError("several pool_variants values need dev queries to choose from")
        arm, reranker_model = "ann", None
        if reranker:
            from models.reranker import load_reranker

            reranker_model = load_reranker(reranker, runtime=getattr(base, "rerank_runtime", "auto"),
                                           threads=getattr(base, "torch_threads", None))
            arm = "ann+rerank"
        matcher = Matcher(encoder, retriever, reranker=reranker_model,
                          rerank_k=int(rerank_k or getattr(base, "rerank_k", 20)),
                          rerank_weight=rerank_weight if rerank_weight is not None else getattr(base, "rerank_weight", None),
                          pool_variants=pools[0])
        pool_report = None
        if len(pools) > 1:
            t = time.perf_counter()
            pool_report = tune_pool(matcher, retriever, dev, pools, float(base.default_threshold), top_k, batch_size)
            timings["pool_tuning_s"] = time.perf_counter() - t
        weight_report = None
        if reranker_model is not None and tune_rerank_weight and dev:
            # one pass with the cross-encoder alone, every candidate kept; the weight grid is re-scored offline
            from app.rerank_tuning import tune_weight

            pure = Matcher(encoder, retriever, reranker=reranker_model, rerank_k=matcher.rerank_k, rerank_weight=1.0,
                           pool_variants=matcher.pool_variants)
            t = time.perf_counter()
            results, _ = match_all(pure, retriever, [q.query for q in dev], float(base.default_threshold),
                                   max(top_k, matcher.rerank_k), batch_size, "dev (weight grid)", arm=arm)
            timings["rerank_weight_tuning_s"] = time.perf_counter() - t
            best, f1s = tune_weight(results, [q.faq_id for q in dev], calibration_for(retriever.manifest, encoder, matcher.pool_variants), top_k)
            matcher.rerank_weight = best
            weight_report = {"chosen": best, "dev_f1_by_weight": f1s}

        default_threshold = float(base.default_threshold)
        threshold, threshold_source, dev_report = default_threshold, "default", None
        if dev:
            results, secs = match_all(matcher, retriever, [q.query for q in dev], default_threshold, top_k,
                                      batch_size, "dev", arm=arm)
            timings["dev_match_s"] = secs
            dev_outcomes = outcomes_from_results(results, [q.faq_id for q in dev])
            threshold, dev_f1 = tune_threshold(dev_outcomes)
            threshold_source = "dev"
            dev_report = {
                "tuned_f1": dev_f1,
                "at_threshold": all_metrics(apply_threshold(dev_outcomes, threshold)),
                "at_default_threshold": all_metrics(dev_outcomes),
            }

        results, secs = match_all(matcher, retriever, [q.query for q in queries], threshold, top_k, batch_size, "test",
                                  arm=arm)
        timings["test_match_s"] = secs
        timings["test_queries_per_s"] = len(queries) / max(secs, 1e-9)
        outcomes = outcomes_from_results(results, [q.faq_id for q in queries])
        enc_ms = [r.timings_ms.get("encode", 0.0) for r in results]
        timings["total_s"] = time.perf_counter() - t_all
        report = {
            "kb": str(kb_path),
            "queries": str(queries_path),
            "dev": str(dev_path) if dev_path else None,
            "variants_per_faq": variants_per_faq,
            "model": spec,
            "encoder_id": encoder.id,
            "arm": arm,
            "pool_variants": matcher.pool_variants,
            "pool_tuning": pool_report,
            "reranker": {"path": reranker, "id": reranker_model.id, "rerank_k": matcher.rerank_k,
                         "weight": matcher.rerank_weight if matcher.rerank_weight is not None
                         else reranker_model.config.fusion_weight, "weight_tuning": weight_report}
            if reranker_model else None,
            "index": {
                "version": manifest["version"],
                "n_trees": manifest.get("n_trees"),
                "search_k": manifest.get("search_k"),
                "calibration": manifest.get("calibration"),
                "self_recall_at_10": (manifest.get("verify") or {}).get("self_recall_at_10"),
                "timings": manifest.get("timings"),
            },
            "counts": {
                "faqs": len(faq_ids),
                "variants": len(store.snapshot().variants),
                "imported": _as_dict(import_report),
                "test_queries": len(queries),
                "test_in_scope": sum(q.faq_id is not None for q in queries),
                "test_oos": sum(q.faq_id is None for q in queries),
                "dev_queries": len(dev) if dev else 0,
            },
            "threshold": {"value": threshold, "source": threshold_source, "default": default_threshold},
            "top_k": top_k,
            "metrics": all_metrics(outcomes),
            "metrics_at_default_threshold": all_metrics(apply_threshold(outcomes, default_threshold)),
            "dev_metrics": dev_report,
            "timings": {k: round(v, 4) for k, v in timings.items()},
            "mean_batch_encode_ms": float(np.mean(enc_ms)) if enc_ms else 0.0,
            "workdir": None if own_tmp else str(work),
        }
        return report
    finally:
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)


def _as_dict(obj: Any) -> Any:
    if obj is None:
        return None
    if hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(obj)
    if isinstance(obj, dict):
        return obj
    return str(obj)


# ---------------------------------------------------------------------------------------------
# formatting

_ROWS = [
    ("top-1 accuracy (in-scope)", "top1_accuracy"),
    ("MRR", "mrr"),
    (f"recall@{RECALL_K}", f"recall_at_{RECALL_K}"),
    ("answer precision", "answer_precision"),
    ("answer recall", "answer_recall"),
    ("answer F1", "answer_f1"),
    ("out-of-scope recall", "oos_recall"),
]


def format_table(report: dict) -> str:
    """A readable plain-text table of the test metrics (and dev, when tuned)."""
    m, thr = report["metrics"], report["threshold"]
    dev = (report.get("dev_metrics") or {}).get("at_threshold")
    lines = [
        f"encoder {report['encoder_id']}  ({report['model']})",
        f"KB: {report['counts']['faqs']} FAQs, {report['counts']['variants']} variants;"
        f" test: {m['n_queries']} queries ({m['n_in_scope']} in scope, {m['n_oos']} out of scope)",
        f"threshold {thr['value']:.4f} ({'tuned on dev' if thr['source'] == 'dev' else 'default'}); {_pool_text(report)}",
        "",
        f"{'metric':<28}{'test':>10}{'dev':>10}" if dev else f"{'metric':<28}{'test':>10}",
    ]
    def pct(value: float | None) -> str:
        return f"{value * 100:>9.2f}%" if value is not None else f"{'n/a':>10}"

    for label, key in _ROWS:
        lines.append(f"{label:<28}{pct(m[key])}" + (pct(dev[key]) if dev else ""))
    lines.append(f"{'answered / correct':<28}{m['n_answered']:>5} / {m['n_correct']}")
    t = report["timings"]
    lines.append(
        f"timings: import {t.get('import_s', 0):.1f}s, index build {t.get('index_build_s', 0):.1f}s, "
        f"test {t.get('test_match_s', 0):.1f}s ({t.get('test_queries_per_s', 0):.0f} queries/s)"
    )
    return "\n".join(lines)


def _pool_text(report: dict) -> str:
    pool, tuning = report.get("pool_variants", 1), report.get("pool_tuning")
    text = "best phrasing's cosine" if pool == 1 else f"mean cosine of the best {pool} phrasings"
    if tuning:
        text += " (dev F1 by N: " + ", ".join(f"{n} {v['dev_f1']:.4f}" for n, v in tuning["dev_by_pool"].items()) + ")"
    return text


def format_markdown(report: dict) -> str:
    m, thr = report["metrics"], report["threshold"]
    dev = (report.get("dev_metrics") or {}).get("at_threshold")
    lines = [
        f"# Match evaluation: `{report['encoder_id']}`",
        "",
        f"- KB `{report['kb']}`: {report['counts']['faqs']} FAQs, {report['counts']['variants']} variants",
        f"- test `{report['queries']}`: {m['n_queries']} queries ({m['n_in_scope']} in scope, {m['n_oos']} out of scope)",
        f"- threshold {thr['value']:.4f} ({'tuned on dev `' + str(report['dev']) + '`' if thr['source'] == 'dev' else 'default'})",
        f"- FAQ score: {_pool_text(report)}",
        f"- index {report['index']['version']}: n_trees {report['index']['n_trees']}, search_k {report['index']['search_k']}",
        "",
        "| metric | test |" + (" dev |" if dev else ""),
        "|---|---|" + ("---|" if dev else ""),
    ]
    for label, key in _ROWS:
        cells = [m[key]] + ([dev[key]] if dev else [])
        lines.append(f"| {label} |" + "".join(f" {v * 100:.2f} |" if v is not None else " n/a |" for v in cells))
    lines.append("")
    lines.append("Timings (s): " + ", ".join(f"{k} {v}" for k, v in report["timings"].items()))
    return "\n".join(lines) + "\n"


def write_report(report: dict, json_path: str | Path, md_path: str | Path | None = None) -> None:
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if md_path:
        md_path = Path(md_path)
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(format_markdown(report), encoding="utf-8")
