"""Matching evaluation: the `faq eval match` runner.

The metrics themselves are in evaluation/measures.py.

The runner goes through the PRODUCT's own path so the numbers describe what is served: a fresh
`FaqStore` on a SQLite file in a work folder (Alembic migrations, `import_records`),
`index.build.build_index` with the chosen encoder (Annoy + calibration), then the pipeline of app/match/assembly.py `build_pipeline`
over all queries in batches. The answer threshold is tuned on dev queries (maximising answer F1)
when a dev file is given, else the default threshold from settings is used.
"""
from __future__ import annotations

import copy
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from evaluation.measures import (
    RECALL_K,
    all_metrics,
    apply_threshold,
    expected_calibration_error,
    outcomes_from_results,
    top1_accuracy,
    tune_threshold,
)

log = logging.getLogger(__name__)
#: how many FAQs the evaluation asks the matcher for (MRR looks this deep)
EVAL_TOP_K = 10


def match_all(matcher: Any, retriever: Any, queries: Sequence[str], threshold: float, top_k: int,
              batch_size: int, desc: str, arm: str = "ann") -> tuple[list[Any], float]:
    """All queries through `Matcher.match_many` in batches (one pinned retriever, one arm) -> (results, seconds)."""
    from tqdm import tqdm

    from app.match import MatchQuery

    results: list[Any] = []
    t = time.perf_counter()
    with tqdm(total=len(queries), unit="q", desc=desc, file=sys.stderr, disable=len(queries) < batch_size) as bar:
        for start in range(0, len(queries), batch_size):
            batch = list(queries[start : start + batch_size])
            results.extend(matcher.match_many([MatchQuery(q, top_k, threshold, arm=arm) for q in batch],
                                              retriever=retriever))
            bar.update(len(batch))
    return results, time.perf_counter() - t


#: `faq eval match --tune-answer-weight`: the answer weights tried on dev
ANSWER_WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def tune_first_stage(matcher: Any, retriever: Any, dev: Sequence[Any], pools: Sequence[int], weights: Sequence[float],
                     threshold: float, top_k: int, batch_size: int) -> tuple[dict | None, dict | None]:
    """Match the dev queries (`ann` arm) with every (pool size, answer weight); leave the matcher at the pair
    with the best dev answer F1 (then top-1, then the smaller N and weight) and return (pool report,
    answer-weight report): {chosen, dev_by_pool} at the chosen weight and {chosen, dev_by_weight} at the
    chosen pool, None for an option with a single value."""
    grid = {}
    for pool in pools:
        for weight in weights:
            matcher.pool_variants, matcher.answer_weight = pool, weight
            results, _ = match_all(matcher, retriever, [q.query for q in dev], threshold, top_k, batch_size,
                                   f"dev (pool {pool}, answer weight {weight:g})")
            outcomes = outcomes_from_results(results, [q.faq_id for q in dev])
            grid[pool, weight] = {"dev_f1": tune_threshold(outcomes)[1], "dev_top1": top1_accuracy(outcomes)}
    pool, weight = max(grid, key=lambda pw: (grid[pw]["dev_f1"], grid[pw]["dev_top1"], -pw[0], -pw[1]))
    matcher.pool_variants, matcher.answer_weight = pool, weight
    pool_report = {"chosen": pool, "dev_by_pool": {p: grid[p, weight] for p in pools}} if len(pools) > 1 else None
    weight_report = {"chosen": weight, "dev_by_weight": {f"{w:g}": grid[pool, w] for w in weights}} \
        if len(weights) > 1 else None
    return pool_report, weight_report


def keep_first_variants(records: Sequence[Any], n: int) -> list[Any]:
    """Each FAQ's first `n` phrasings (n=1: a KB written with a single question per FAQ)."""
    seen: dict[str, int] = {}
    kept = []
    for r in records:
        seen[r.faq_id] = seen.get(r.faq_id, 0) + 1
        if seen[r.faq_id] <= n:
            kept.append(r)
    return kept


def known_faq_check(name: str, golds: Sequence[str | None], faq_ids: set[str]) -> None:
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
    answer_weights: Sequence[float] | None = None,
    query_encoder: str | None = None,
) -> dict:
    """Import the KB into a fresh store, build the index, match dev/test queries; returns the report.

    `variants_per_faq`: keep only each FAQ's first N phrasings (N=1: how well a KB written with a single
    question per FAQ matches).
    `reranker`: a re-ranker folder; the queries then run the `ann+rerank` arm (the cross-encoder re-scores
    the top `rerank_k` FAQs, default settings.rerank_k) and the threshold is tuned on its probabilities.
    `pool_variants`: how many of a FAQ's best phrasings its cosine averages (index/candidates.py `group_hits`;
    default settings.pool_variants); several values are each run on dev (`ann` arm, queries encoded once)
    and the one with the best dev answer F1 is used.
    `answer_weights`: the answer's share of a FAQ's score (index/answers.py; default settings.answer_weight);
    several values are tried on dev together with the pool sizes, as for `pool_variants`. A KB whose
    answers are placeholders builds without answer evidence and ignores it (the report says so).
    `query_encoder`: queries are encoded by this spec (a `faq train query-encoder` folder) while the index is
    built by `model`; refused unless it was fitted to that encoder's space."""
    from app.match.assembly import encoder_spec
    from app.settings import get_settings
    from app.stages import load_stages
    from evaluation.scratch import scratch_pipeline
    from index.calibration import calibration_for
    from kb.files import read_kb, read_queries

    base = settings or get_settings()
    spec = model or encoder_spec(base)
    timings: dict[str, float] = {}
    t_all = time.perf_counter()

    records = read_kb(kb_path)
    if variants_per_faq is not None:
        records = keep_first_variants(records, variants_per_faq)
    queries = read_queries(queries_path)
    dev = read_queries(dev_path) if dev_path else None
    faq_ids = {r.faq_id for r in records}
    known_faq_check(str(queries_path), [q.faq_id for q in queries], faq_ids)
    if dev is not None:
        known_faq_check(str(dev_path), [q.faq_id for q in dev], faq_ids)
    pools = list(pool_variants) if pool_variants else [base.pool_variants]  # None: by build
    if len(pools) > 1 and not dev:
        raise ValueError("several pool_variants values need dev queries to choose from")
    weights = list(answer_weights) if answer_weights else [float(base.answer_weight)]
    if len(weights) > 1 and not dev:
        raise ValueError("several answer weights need dev queries to choose from")

    own_tmp = workdir is None
    work = Path(tempfile.mkdtemp(prefix="faq-eval-")) if own_tmp else Path(workdir)
    update: dict[str, Any] = {}
    if n_trees is not None:
        update["ann_n_trees"] = n_trees
    if search_k is not None:
        update["ann_search_k"] = search_k
    scratch = None
    try:
        stages = load_stages(base, reranker, rerank_weight) if reranker else []
        # dev queries are matched more than once when something is tuned on them: the encoder memoises
        # balanced mode: the build replays its held-out phrasings through the query side, as `faq index build` does
        query_side = _query_side(query_encoder, base) if query_encoder else None
        scratch = scratch_pipeline(records, workdir=work, settings=base, settings_update=update, spec=spec,
                                   stages=stages, batch_size=batch_size, progress=progress, memo=True,
                                   rerank_k=rerank_k, pool_variants=pools[0], answer_weight=weights[0], cache_size=0,
                                   query_side=query_side)
        timings.update(scratch.timings)
        store, manifest, retriever, encoder = scratch.store, scratch.manifest, scratch.retriever, scratch.encoder
        matcher, import_report = scratch.pipeline, scratch.import_report
        build_encoder_id = encoder.id
        if query_side is not None:
            teacher = getattr(query_side, "teacher", None)
            if teacher != encoder.id:
                raise ValueError(f"query encoder {query_encoder} was fitted to {teacher!r}, but the index is built by "
                                 f"{encoder.id!r}")
            encoder = query_side
            matcher = scratch.pipeline_with(encoder=encoder, stages=stages, rerank_k=rerank_k, pool_variants=pools[0],
                                            answer_weight=weights[0], cache_size=0)
        if retriever.answer_vectors is None:
            weights = weights[:1]  # nothing to tune: the build has no answer evidence
        stage = stages[0] if stages else None
        arm = "ann+rerank" if stages else "ann"
        pool_report = answer_weight_report = None
        if len(pools) > 1 or len(weights) > 1:
            t = time.perf_counter()
            pool_report, answer_weight_report = tune_first_stage(
                matcher, retriever, dev, pools, weights, float(base.default_threshold), top_k, batch_size)
            timings["first_stage_tuning_s"] = time.perf_counter() - t
        weight_report = None
        if stage is not None and tune_rerank_weight and dev:
            # one pass with the cross-encoder alone, every candidate kept; the weight grid is re-scored offline
            from evaluation.rerank_tuning import tune_weight

            pure_stage = copy.copy(stage)  # the same model alone (weight 1): the grid is pooled offline
            pure_stage.weight = 1.0
            pure = scratch.pipeline_with(stages=[pure_stage], rerank_k=matcher.rerank_k,
                                         pool_variants=matcher.pool_variants, answer_weight=matcher.answer_weight,
                                         cache_size=0)
            t = time.perf_counter()
            results, _ = match_all(pure, retriever, [q.query for q in dev], float(base.default_threshold),
                                   max(top_k, matcher.rerank_k), batch_size, "dev (weight grid)", arm=arm)
            timings["rerank_weight_tuning_s"] = time.perf_counter() - t
            best, f1s = tune_weight(results, [q.faq_id for q in dev], calibration_for(retriever.manifest, encoder, matcher.served_pool(retriever), matcher.served_answer_weight(retriever)), top_k)
            stage.weight = best
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
            "query_encoder": {"spec": query_encoder, "id": encoder.id, "build_encoder_id": build_encoder_id}
            if query_encoder else None,
            "encoder_runtime": getattr(encoder, "runtime", "torch"),
            "arm": arm,
            "pool_variants": matcher.served_pool(retriever),
            "pool_tuning": pool_report,
            "answers": {**(manifest.get("answers") or {}), "weight": matcher.served_answer_weight(retriever),
                        "weight_tuning": answer_weight_report},
            "reranker": {"path": reranker, "id": stage.id, "rerank_k": matcher.rerank_k,
                         "weight": stage.served_weight, "weight_tuning": weight_report}
            if stage else None,
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
            "ece_top1": expected_calibration_error(outcomes),
            "metrics_at_default_threshold": all_metrics(apply_threshold(outcomes, default_threshold)),
            "dev_metrics": dev_report,
            "timings": {k: round(v, 4) for k, v in timings.items()},
            "mean_batch_encode_ms": float(np.mean(enc_ms)) if enc_ms else 0.0,
            "workdir": None if own_tmp else str(work),
        }
        return report
    finally:
        if scratch is not None:
            scratch.store.close()
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)


def _query_side(spec: str, settings: Any) -> Any:
    """The query encoder `spec`, memoising like the build's (the caller checks it lands in the build's space)."""
    from models.encoders.base import SharedEncoder
    from models.encoders.load import load_encoder

    return SharedEncoder(load_encoder(spec, device=settings.device, runtime=settings.encoder_runtime or "auto",
                                      threads=settings.encoder_threads, cache_dir=settings.mpnet_cache), memo=True)


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
        f"encoder {report['encoder_id']}  ({report['model']}, runtime {report.get('encoder_runtime', 'torch')})",
        f"KB: {report['counts']['faqs']} FAQs, {report['counts']['variants']} variants;"
        f" test: {m['n_queries']} queries ({m['n_in_scope']} in scope, {m['n_oos']} out of scope)",
        f"threshold {thr['value']:.4f} ({'tuned on dev' if thr['source'] == 'dev' else 'default'}); {_pool_text(report)}",
        _answer_text(report),
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


def _answer_text(report: dict) -> str:
    answers = report.get("answers") or {}
    if not answers.get("used"):
        return "answers: not evidence (" + (answers.get("reason") or "the build encoded none") + ")"
    text = f"answers: weight {answers['weight']:g} in the FAQ score"
    tuning = answers.get("weight_tuning")
    if tuning:
        text += " (dev top-1 / F1 by weight: " + ", ".join(
            f"{w} {v['dev_top1']:.3f}/{v['dev_f1']:.3f}" for w, v in tuning["dev_by_weight"].items()) + ")"
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
        f"- FAQ score: {_pool_text(report)}; {_answer_text(report)}",
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
