"""`faq eval ab`: the offline A/B evaluation of the retrieval arms on one KB and labelled queries.

The paper's comparison (Table VIII): ANN retrieval over encoder vectors vs the classic pipeline,
BM25 recalls 30 candidates that the encoder re-ranks. Every arm runs through the PRODUCT's path, as
`faq eval match` does: the KB is imported into a scratch store, `faq index build`'s `build_index`
writes the Annoy index and the lexical index under one version (evaluation/scratch.py), and the pipeline answers
with `MatchQuery.arm` set, exactly as `/match` does.

Per arm:
- answer precision / recall / F1 at the arm's own threshold, tuned on --dev for answer F1 (scores of
  different arms are different quantities: calibrated cosine vs cross-encoder probability);
- top-1, MRR, nDCG@10 over in-scope queries, and recall@K of each recall stage (ANN@K or BM25@K; the
  re-ranker's input for `+rerank` arms);
- latency p50 / p99 of single-query calls (encode + retrieve + re-rank, as one /match), measured on a
  sample of test queries with the arms interleaved query by query so load changes hit all alike;
- paired bootstrap intervals for the answer-F1 difference of the first arm against each other one
  (and of ann against lexical, the paper's comparison).

Outputs in --out: report.md, report.json, pr_threshold.png (answer precision / recall / F1 against the
threshold per arm) and latency.png (latency distribution per arm).

Re-running is cheap: --out/work (or --workdir) keeps the scratch store, the build and the encoded
queries, reused while the KB file, the encoder and the index parameters are unchanged (`--fresh`
rebuilds); runs that only change search options (--arms, --lexical-k, --rerank-k) can share one.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from app.match.arms import ARMS, base_arm, uses_stages
from evaluation.match import keep_first_variants, known_faq_check
from evaluation.measures import (
    NDCG_K,
    QueryOutcome,
    all_metrics,
    answer_metrics,
    apply_threshold,
    ndcg_at_k,
    outcomes_from_results,
    recall_at_k,
    tune_threshold,
)

log = logging.getLogger(__name__)

#: FAQs the non-re-ranked arms return in the evaluation (BM25's K = 30 needs the full list for recall@30)
WORK_DIR = "work"
DEFAULT_LATENCY_SAMPLE = 200
BOOTSTRAP_SAMPLES = 1000
THRESHOLDS = np.round(np.linspace(0.0, 1.0, 101), 2)


# ---------------------------------------------------------------------------------------------
# metrics on top of evaluation.match's

def threshold_curve(outcomes: Sequence[QueryOutcome], thresholds: Sequence[float] = THRESHOLDS) -> dict[str, list[float]]:
    """Answer precision / recall / F1 when answering at each threshold."""
    curve: dict[str, list[float]] = {"threshold": [float(t) for t in thresholds], "precision": [], "recall": [], "f1": []}
    for t in thresholds:
        m = answer_metrics(apply_threshold(outcomes, float(t)))
        curve["precision"].append(m["answer_precision"] if m["n_answered"] else None)  # undefined: nothing answered
        curve["recall"].append(m["answer_recall"])
        curve["f1"].append(m["answer_f1"])
    return curve


def _answer_indicators(outcomes: Sequence[QueryOutcome]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    answered = np.array([o.answer is not None for o in outcomes], dtype=np.float64)
    correct = np.array([o.answer is not None and o.answer == o.gold for o in outcomes], dtype=np.float64)
    in_scope = np.array([o.gold is not None for o in outcomes], dtype=np.float64)
    return answered, correct, in_scope


def _f1_from_sums(answered: np.ndarray, correct: np.ndarray, in_scope: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(answered > 0, correct / answered, 0.0)
        r = np.where(in_scope > 0, correct / in_scope, 0.0)
        return np.where(p + r > 0, 2 * p * r / (p + r), 0.0)


def paired_f1_difference(a: Sequence[QueryOutcome], b: Sequence[QueryOutcome], samples: int = BOOTSTRAP_SAMPLES,
                         seed: int = 0, confidence: float = 0.95) -> dict:
    """F1(a) - F1(b) on the same queries, with a paired bootstrap interval (queries resampled)."""
    ia, ib = _answer_indicators(a), _answer_indicators(b)
    n = len(a)
    observed = float(_f1_from_sums(*(x.sum(keepdims=True) for x in ia))[0]
                     - _f1_from_sums(*(x.sum(keepdims=True) for x in ib))[0])
    rng = np.random.default_rng(seed)
    diffs = np.empty(samples, dtype=np.float64)
    for chunk in range(0, samples, 100):  # 100 resamples at a time keeps memory at 100 x n
        idx = rng.integers(0, n, size=(min(100, samples - chunk), n))
        fa = _f1_from_sums(*(x[idx].sum(axis=1) for x in ia))
        fb = _f1_from_sums(*(x[idx].sum(axis=1) for x in ib))
        diffs[chunk: chunk + len(idx)] = fa - fb
    lo, hi = np.percentile(diffs, [(1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100])
    return {"difference": observed, "ci": [float(lo), float(hi)], "confidence": confidence,
            "significant": bool(lo > 0 or hi < 0), "bootstrap_samples": samples}


# ---------------------------------------------------------------------------------------------
# preparing the store, the build and the encoded queries (reused across runs)

def _sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def analysis_fingerprint() -> str:
    """Changes whenever the lexical analysis changes, so a reused build never has a stale BM25 index."""
    from index import lexical
    from index.elasticsearch.lexical import ES_MAPPINGS, ES_SETTINGS

    spec = json.dumps([lexical.TEXT_REWRITES, lexical.ENGLISH_STOP_WORDS, ES_SETTINGS, ES_MAPPINGS],
                      sort_keys=True, default=str)
    return hashlib.sha256(spec.encode("utf-8")).hexdigest()[:16]


def build_fingerprint(kb_path: str | Path, encoder: Any, spec: str, settings: Any, es_url: str | None,
                      variants_per_faq: int | None = None) -> dict:
    """What a reused store and build must have been made from: the KB file, the encoder, the index
    parameters and the lexical analysis (evaluation/scratch.py reuses a work folder made for an equal one)."""
    fingerprint = {
        "kb_sha256": _sha256(kb_path), "encoder_spec": spec, "encoder_id": encoder.id,
        "n_trees": settings.ann_n_trees, "search_k": settings.ann_search_k, "elasticsearch": bool(es_url),
        "es_index_prefix": settings.es_index_prefix, "lexical_analysis": analysis_fingerprint(),
    }
    if variants_per_faq is not None:  # only when used: work folders of full-KB runs stay reusable
        fingerprint["variants_per_faq"] = variants_per_faq
    return fingerprint


def encode_cached(encoder: Any, texts: list[str], work: Path, batch_size: int, progress: bool, desc: str) -> np.ndarray:
    """Query vectors, cached in `work` by encoder id and texts (re-runs skip the encoding)."""
    from index.build import encode_in_batches

    key = hashlib.sha256((encoder.id + "\n" + "\n".join(texts)).encode("utf-8")).hexdigest()[:20]
    path = work / f"queries-{key}.npy"
    if path.is_file():
        vecs = np.load(path)
        if vecs.shape == (len(texts), encoder.dim):
            return vecs
    vecs = encode_in_batches(encoder, texts, batch_size, progress) if texts else np.zeros((0, encoder.dim), np.float32)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, vecs)
    tmp.replace(path)
    return vecs


# ---------------------------------------------------------------------------------------------
# running arms

def run_arm(matcher: Any, retriever: Any, arm: str, queries: Sequence[str], vecs: np.ndarray, top_k: int,
            batch_size: int, progress: bool) -> tuple[list[Any], float]:
    """Every query through `Matcher.rank` on `arm` (threshold 0: the answer decision is re-applied
    per threshold afterwards) -> (results, seconds)."""
    from tqdm import tqdm

    from app.match import MatchQuery

    results: list[Any] = []
    t = time.perf_counter()
    # the cross-encoder scores each query's candidates in its own pass: smaller batches show progress sooner
    step = batch_size if not uses_stages(arm) else max(1, min(batch_size, 32))
    with tqdm(total=len(queries), unit="q", desc=arm, file=sys.stderr, disable=not progress or len(queries) < step) as bar:
        for start in range(0, len(queries), step):
            batch = [MatchQuery(q, top_k, 0.0, arm) for q in queries[start: start + step]]
            results.extend(matcher.rank(batch, vecs[start: start + len(batch)], retriever))
            bar.update(len(batch))
    return results, time.perf_counter() - t


def measure_latency(matcher: Any, retriever: Any, arms: Sequence[str], queries: Sequence[str], top_k: int,
                    sample: int, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """Single-query calls (encode + retrieve + re-rank, as one /match) per arm on a sample of queries.
    Arms are interleaved query by query so a load change on the machine hits every arm alike."""
    from app.match import MatchQuery

    if sample <= 0 or not queries:
        return {arm: {"total": [], "encode": [], "retrieve": [], "rerank": []} for arm in arms}
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(queries), size=min(sample, len(queries)), replace=False)
    out = {arm: {"total": [], "encode": [], "retrieve": [], "rerank": []} for arm in arms}
    for arm in arms:  # warm-up: first calls pay one-off costs (lazy opens, allocator growth)
        matcher.match_many([MatchQuery(queries[int(rows[0])], top_k, 0.5, arm)], retriever=retriever)
    for row in rows.tolist():
        for arm in arms:
            t = time.perf_counter()
            [result] = matcher.match_many([MatchQuery(queries[row], top_k, 0.5, arm)], retriever=retriever)
            out[arm]["total"].append((time.perf_counter() - t) * 1000.0)
            for stage in ("encode", "retrieve", "rerank"):
                out[arm][stage].append(float(result.timings_ms.get(stage, 0.0)))
    return out


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "mean": None}
    arr = np.asarray(values, dtype=np.float64)
    return {"n": len(arr), "p50": float(np.percentile(arr, 50)), "p90": float(np.percentile(arr, 90)),
            "p99": float(np.percentile(arr, 99)), "mean": float(arr.mean())}


def parse_arms(text: str) -> list[str]:
    arms = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        raise ValueError(f"--arms: unknown arm(s) {unknown or text!r}; valid arms: {', '.join(ARMS)}")
    return list(dict.fromkeys(arms))


# ---------------------------------------------------------------------------------------------
# the runner

def run_eval_ab(
    kb_path: str | Path,
    queries_path: str | Path,
    out_dir: str | Path,
    *,
    dev_path: str | Path | None = None,
    arms: Sequence[str] = ARMS,
    model: str | None = None,
    reranker_path: str | None = None,
    es_url: str | None = None,
    lexical_engine: str | None = None,
    lexical_k: int | None = None,
    rerank_k: int | None = None,
    latency_sample: int = DEFAULT_LATENCY_SAMPLE,
    batch_size: int = 256,
    fresh: bool = False,
    workdir: str | Path | None = None,
    variants_per_faq: int | None = None,
    progress: bool = True,
    settings: Any = None,
    say: Callable[[str], None] | None = None,
) -> dict:
    """Evaluate `arms` on the KB and queries; writes report.md/json and the PNGs into `out_dir`."""
    import torch

    from app.match.assembly import encoder_spec, load_configured_encoder
    from app.settings import get_settings
    from app.stages import load_stages
    from evaluation.scratch import scratch_pipeline
    from index.lexical import resolve_engine
    from kb.files import read_kb, read_queries

    say = say or (lambda msg: print(msg, file=sys.stderr))
    base = settings or get_settings()
    torch.set_num_threads(max(1, int(base.torch_threads)))
    out = Path(out_dir)
    work = Path(workdir) if workdir else out / WORK_DIR
    arms = list(arms)
    es_url = es_url if es_url is not None else base.es_url
    engine = resolve_engine(lexical_engine or base.lexical_engine, es_url)
    lexical_k = int(lexical_k or base.lexical_k)
    rerank_k = int(rerank_k or getattr(base, "rerank_k", 20))
    reranker_path = reranker_path or getattr(base, "reranker", None)
    timings: dict[str, float] = {}
    t_all = time.perf_counter()

    records = read_kb(kb_path)
    if variants_per_faq is not None:
        records = keep_first_variants(records, variants_per_faq)
    queries = read_queries(queries_path)
    dev = read_queries(dev_path) if dev_path else []
    faq_ids = {r.faq_id for r in records}
    known_faq_check(str(queries_path), [q.faq_id for q in queries], faq_ids)
    known_faq_check(str(dev_path), [q.faq_id for q in dev], faq_ids)

    skipped: dict[str, str] = {}
    rerank_stages: list = []
    if any(uses_stages(a) for a in arms):
        if reranker_path:
            # the re-ranker's fusion with the first-stage score as served (FAQ_RERANK_WEIGHT, else its config's)
            rerank_stages = load_stages(base, reranker_path)
        else:
            for arm in [a for a in arms if uses_stages(a)]:
                skipped[arm] = "no re-ranker: pass --reranker DIR (or set FAQ_RERANKER)"
    run_arms = [a for a in arms if a not in skipped]
    if not run_arms:
        raise ValueError("no arm left to run: " + "; ".join(f"{a}: {r}" for a, r in skipped.items()))
    for arm, reason in skipped.items():
        say(f"SKIPPED arm {arm}: {reason}")

    spec = model or encoder_spec(base)
    if Path(spec).exists():
        spec = str(Path(spec).resolve())
    t = time.perf_counter()
    encoder = load_configured_encoder(base, spec=spec)
    timings["load_encoder_s"] = time.perf_counter() - t

    t = time.perf_counter()
    # the stages encode their phrasings themselves: a reused build may predate them, a fresh one does alike
    prep = scratch_pipeline(records, workdir=work, settings=base, encoder=encoder, spec=spec, stages=rerank_stages,
                            store_stage_vectors=False, batch_size=min(batch_size, 128), progress=progress, report=say,
                            lexical_engine=engine, es_url=es_url, fresh=fresh,
                            fingerprint=build_fingerprint(kb_path, encoder, spec, base, es_url, variants_per_faq),
                            lexical_k=lexical_k, rerank_k=rerank_k, cache_size=0)
    timings["prepare_s"] = time.perf_counter() - t
    try:
        t = time.perf_counter()
        dev_vecs = encode_cached(encoder, [q.query for q in dev], work, batch_size, progress, "dev")
        test_vecs = encode_cached(encoder, [q.query for q in queries], work, batch_size, progress, "test")
        timings["encode_queries_s"] = time.perf_counter() - t

        matcher = prep.pipeline
        # first-stage arms return their whole candidate list (recall@K); re-ranked arms NDCG_K FAQs
        first_stage_k = max(NDCG_K, lexical_k)
        needed = list(dict.fromkeys([base_arm(a) for a in run_arms] + run_arms))  # base arms give stage recall
        outcomes: dict[str, dict[str, list[QueryOutcome]]] = {}
        for arm in needed:
            top_k = NDCG_K if uses_stages(arm) else first_stage_k
            arm_out: dict[str, list[QueryOutcome]] = {}
            if dev:
                results, secs = run_arm(matcher, prep.retriever, arm, [q.query for q in dev], dev_vecs, top_k,
                                        batch_size, progress)
                timings[f"dev_{arm}_s"] = secs
                arm_out["dev"] = outcomes_from_results(results, [q.faq_id for q in dev])
            results, secs = run_arm(matcher, prep.retriever, arm, [q.query for q in queries], test_vecs, top_k,
                                    batch_size, progress)
            timings[f"test_{arm}_s"] = secs
            arm_out["test"] = outcomes_from_results(results, [q.faq_id for q in queries])
            outcomes[arm] = arm_out

        t = time.perf_counter()
        latency = measure_latency(matcher, prep.retriever, run_arms, [q.query for q in queries], NDCG_K, latency_sample)
        timings["latency_s"] = time.perf_counter() - t

        default_threshold = float(base.default_threshold)
        arm_reports: dict[str, dict] = {}
        tuned: dict[str, list[QueryOutcome]] = {}
        for arm in run_arms:
            if dev:
                threshold, dev_f1 = tune_threshold(outcomes[arm]["dev"])
                source = "dev"
            else:
                threshold, dev_f1, source = default_threshold, None, "default"
            test = apply_threshold(outcomes[arm]["test"], threshold)
            tuned[arm] = test
            metrics = all_metrics(test)
            metrics[f"ndcg_at_{NDCG_K}"] = ndcg_at_k(test)
            base_out = outcomes[base_arm(arm)]["test"]
            first = base_arm(arm)
            depth = lexical_k if first == "lexical" else first_stage_k
            stages = {f"{'bm25' if first == 'lexical' else 'ann'}@{depth}": recall_at_k(base_out, depth)}
            if uses_stages(arm):
                stages[f"{base_arm(arm)}@{rerank_k} (re-ranker input)"] = recall_at_k(base_out, rerank_k)
            arm_reports[arm] = {
                "threshold": {"value": threshold, "source": source, "dev_f1": dev_f1},
                "metrics": metrics,
                "metrics_at_default_threshold": all_metrics(apply_threshold(outcomes[arm]["test"], default_threshold)),
                "recall_stages": stages,
                "latency_ms": {stage: _percentiles(values) for stage, values in latency[arm].items()},
                "curve": threshold_curve(outcomes[arm]["test"]),
                "run_s": round(timings.get(f"test_{arm}_s", 0.0), 3),
            }
        comparisons = {}
        first = run_arms[0]
        for arm in run_arms[1:]:  # F1(first) - F1(arm)
            comparisons[f"{first} vs {arm}"] = paired_f1_difference(tuned[first], tuned[arm])
        if "ann" in run_arms and "lexical" in run_arms and "ann vs lexical" not in comparisons:
            comparisons["ann vs lexical"] = paired_f1_difference(tuned["ann"], tuned["lexical"])
        timings["total_s"] = time.perf_counter() - t_all
        es_block = (prep.manifest.get("lexical") or {}).get("elasticsearch") or {}
        report = {
            "kb": str(kb_path), "queries": str(queries_path), "dev": str(dev_path) if dev_path else None,
            "variants_per_faq": variants_per_faq,
            "model": spec, "encoder_id": encoder.id, "pool_variants": matcher.served_pool(prep.retriever),
            "answer_weight": matcher.served_answer_weight(prep.retriever),
            "lexical": {"engine": engine, "k": lexical_k, "location": getattr(prep.lexical, "location", None),
                        "elasticsearch_url": es_block.get("url")},
            "reranker": {"path": reranker_path, "id": rerank_stages[0].id, "rerank_k": rerank_k,
                         "weight": rerank_stages[0].served_weight} if rerank_stages else None,
            "index": {"version": prep.manifest["version"], "n_trees": prep.manifest.get("n_trees"),
                      "search_k": prep.manifest.get("search_k"), "calibration": prep.manifest.get("calibration"),
                      "reused": prep.reused},
            "counts": {"faqs": len(faq_ids), "variants": len(records), "test_queries": len(queries),
                       "test_in_scope": sum(q.faq_id is not None for q in queries),
                       "test_oos": sum(q.faq_id is None for q in queries), "dev_queries": len(dev)},
            "arms": arm_reports,
            "arms_requested": arms,
            "skipped": skipped,
            "comparisons": comparisons,
            "latency_sample": min(latency_sample, len(queries)),
            "torch_threads": torch.get_num_threads(),
            "timings": {k: round(v, 3) for k, v in timings.items()},
        }
        report["target"] = target_check(report)
        write_ab_report(report, out, latency)
        return report
    finally:
        prep.close()


def target_check(report: dict, points: float = 5.0) -> dict | None:
    """The target: ann arm's answer F1 at least `points` above the lexical arm's."""
    arms = report["arms"]
    if "ann" not in arms or "lexical" not in arms:
        return None
    diff = (arms["ann"]["metrics"]["answer_f1"] - arms["lexical"]["metrics"]["answer_f1"]) * 100
    return {"ann_minus_lexical_f1_points": diff, "required_points": points, "met": diff >= points}


# ---------------------------------------------------------------------------------------------
# writing the report

def _p(value: float | None) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value * 100:.2f}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def format_ab_markdown(report: dict) -> str:
    c = report["counts"]
    lex = report["lexical"]
    rr = report["reranker"]
    lines = [
        "# Offline A/B evaluation of the retrieval arms",
        "",
        f"- KB `{report['kb']}`: {c['faqs']} FAQs, {c['variants']} question variants"
        + (f" (each FAQ's first {report['variants_per_faq']} phrasings)" if report.get("variants_per_faq") else ""),
        f"- test `{report['queries']}`: {c['test_queries']} queries ({c['test_in_scope']} in scope, {c['test_oos']} out of scope)",
        f"- thresholds tuned per arm on dev `{report['dev']}` ({c['dev_queries']} queries) for answer F1"
        if report["dev"] else "- no dev file: every arm answers at the default threshold",
        f"- encoder `{report['encoder_id']}`; index {report['index']['version']} (Annoy n_trees {report['index']['n_trees']}, "
        f"search_k {report['index']['search_k']}){' (reused)' if report['index']['reused'] else ''}",
        f"- lexical engine **{lex['engine']}** ({lex['location']}), BM25 top-{lex['k']} FAQs, English analyzer",
        f"- re-ranker `{rr['id']}` on the top {rr['rerank_k']} FAQs, weight {rr.get('weight')} on its probability "
        "in the pool with the first-stage score (1 = the cross-encoder alone)" if rr else "- no re-ranker",
        "",
        "## Answer quality (paper Table VIII form)",
        "",
        "| arm | answer precision | answer recall | answer F1 | threshold | OOS recall |",
        "|---|---|---|---|---|---|",
    ]
    for arm, r in report["arms"].items():
        m = r["metrics"]
        lines.append(f"| {arm} | {_p(m['answer_precision'])} | {_p(m['answer_recall'])} | **{_p(m['answer_f1'])}** "
                     f"| {r['threshold']['value']:.4f} | {_p(m['oos_recall'])} |")
    lines += ["", "## Ranking (in-scope queries) and recall of each stage", "",
              f"| arm | top-1 | MRR | nDCG@{NDCG_K} | recall stages |", "|---|---|---|---|---|"]
    for arm, r in report["arms"].items():
        m = r["metrics"]
        stages = ", ".join(f"{name} {_p(v)}" for name, v in r["recall_stages"].items())
        lines.append(f"| {arm} | {_p(m['top1_accuracy'])} | {_p(m['mrr'])} | {_p(m[f'ndcg_at_{NDCG_K}'])} | {stages} |")
    lines += ["", f"## Latency of one query (ms; {report['latency_sample']} test queries, torch threads "
              f"{report['torch_threads']}, arms interleaved)", "",
              "| arm | p50 | p99 | mean | encode p50 | retrieve p50 | re-rank p50 |", "|---|---|---|---|---|---|---|"]
    for arm, r in report["arms"].items():
        lat = r["latency_ms"]
        lines.append(f"| {arm} | {_ms(lat['total']['p50'])} | {_ms(lat['total']['p99'])} | {_ms(lat['total']['mean'])} "
                     f"| {_ms(lat['encode']['p50'])} | {_ms(lat['retrieve']['p50'])} | {_ms(lat['rerank']['p50'])} |")
    if report["comparisons"]:
        lines += ["", "## Differences in answer F1 (paired bootstrap over test queries)", "",
                  "| comparison | F1 difference (points) | 95% CI | significant |", "|---|---|---|---|"]
        for name, cmp in report["comparisons"].items():
            lo, hi = cmp["ci"]
            lines.append(f"| {name} | {cmp['difference'] * 100:+.2f} | [{lo * 100:+.2f}, {hi * 100:+.2f}] "
                         f"| {'yes' if cmp['significant'] else 'no'} |")
    target = report.get("target")
    if target:
        lines += ["", f"**Target** (ann answer F1 >= lexical + {target['required_points']:.0f} points): "
                  f"ann - lexical = {target['ann_minus_lexical_f1_points']:+.2f} points -> "
                  f"{'met' if target['met'] else 'NOT met'}."]
    if report["skipped"]:
        lines += ["", "## Skipped arms", ""] + [f"- `{arm}`: {reason}" for arm, reason in report["skipped"].items()]
    lines += ["", "## Figures", "", "![answer precision and recall against the threshold](pr_threshold.png)", "",
              "![latency per arm](latency.png)", "",
              "Timings (s): " + ", ".join(f"{k} {v}" for k, v in report["timings"].items())]
    return "\n".join(lines) + "\n"


def plot_threshold_curves(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharex=True)
    for arm, r in report["arms"].items():
        curve = r["curve"]
        thr = r["threshold"]["value"]
        for ax, key in zip(axes, ("precision", "recall", "f1")):
            (line,) = ax.plot(curve["threshold"], np.array(curve[key], dtype=float), label=arm)
            m = r["metrics"]
            value = {"precision": m["answer_precision"], "recall": m["answer_recall"], "f1": m["answer_f1"]}[key]
            ax.plot([thr], [value], "o", color=line.get_color())
    for ax, title in zip(axes, ("answer precision", "answer recall", "answer F1")):
        ax.set_title(title)
        ax.set_xlabel("threshold on the arm's score")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(title="arm (dot: dev-tuned threshold)", fontsize=8)
    fig.suptitle(f"test {report['queries']} on KB {report['kb']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency(report: dict, latency: dict[str, dict[str, list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in report["arms"] if latency.get(a, {}).get("total")]
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(arms) + 2), 4.2))
    if arms:
        data = [latency[a]["total"] for a in arms]
        ax.boxplot(data, showfliers=True, whis=(1, 99))
        ax.set_xticks(range(1, len(arms) + 1), arms)
        for i, a in enumerate(arms, start=1):
            p50 = report["arms"][a]["latency_ms"]["total"]["p50"]
            ax.annotate(f"p50 {p50:.1f}", (i, p50), textcoords="offset points", xytext=(18, 0), fontsize=8)
        ax.set_yscale("log")
    ax.set_ylabel("ms per query (encode + retrieve + re-rank)")
    ax.set_title(f"Latency per arm, {report['latency_sample']} single-query calls (whiskers p1-p99)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_ab_report(report: dict, out_dir: Path, latency: dict[str, dict[str, list[float]]]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_threshold_curves(report, out_dir / "pr_threshold.png")
    plot_latency(report, latency, out_dir / "latency.png")
    report["figures"] = ["pr_threshold.png", "latency.png"]
    tmp = out_dir / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=2, allow_nan=False, default=_json_default) + "\n", encoding="utf-8")
    tmp.replace(out_dir / "report.json")
    (out_dir / "report.md").write_text(format_ab_markdown(report), encoding="utf-8")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def format_ab_table(report: dict) -> str:
    """A short plain-text summary for the terminal."""
    lines = [f"{'arm':<16}{'P':>8}{'R':>8}{'F1':>8}{'top-1':>8}{'MRR':>8}{'nDCG@10':>9}{'p50 ms':>9}{'p99 ms':>9}"]
    for arm, r in report["arms"].items():
        m, lat = r["metrics"], r["latency_ms"]["total"]
        lines.append(f"{arm:<16}{_p(m['answer_precision']):>8}{_p(m['answer_recall']):>8}{_p(m['answer_f1']):>8}"
                     f"{_p(m['top1_accuracy']):>8}{_p(m['mrr']):>8}{_p(m[f'ndcg_at_{NDCG_K}']):>9}"
                     f"{_ms(lat['p50']):>9}{_ms(lat['p99']):>9}")
    for arm, reason in report["skipped"].items():
        lines.append(f"{arm:<16}SKIPPED: {reason}")
    target = report.get("target")
    if target:
        lines.append(f"ann - lexical answer F1: {target['ann_minus_lexical_f1_points']:+.2f} points "
                     f"(target >= +{target['required_points']:.0f}: {'met' if target['met'] else 'NOT met'})")
    return "\n".join(lines)
