"""`faq kb mine` over a store: the query log and the KB read through FaqStore's parts, the text rules in
kb/mining.py. Shared by the command (cli/kb.py) and its measurement (evaluation/kb_mine.py)."""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any, Callable, Sequence

from app.store import FaqStore
from app.store.reviews import cluster_key, phrasing_key
from kb.mining import (
    DEFAULT_MIN_AGREE, DEFAULT_MIN_SCORE, Cluster, LoggedQuery, MiningStats, cluster_unanswered, mine_phrasings,
    phrasing_form,
)


def siamese_agreement(scorer: Any, kb: dict[str, list[str]]) -> Callable[[Sequence[tuple[str, str]]], list[float]]:
    """(query, faq_id) pairs -> the Siamese matcher's probability for the query against the FAQ's best
    phrasing (models/matchers/siamese.py; the KB's phrasing vectors computed once, then only the queries')."""
    import numpy as np

    rows: dict[str, np.ndarray] = {}

    def agree(pairs: Sequence[tuple[str, str]]) -> list[float]:
        needed = [f for f in dict.fromkeys(f for _, f in pairs) if f not in rows and kb.get(f)]
        if needed:
            texts = [q for f in needed for q in kb[f]]
            vectors = scorer.sentence_vectors(texts)
            start = 0
            for f in needed:
                rows[f] = vectors[start:start + len(kb[f])]
                start += len(kb[f])
        queries = list(dict.fromkeys(q for q, _ in pairs))
        u = dict(zip(queries, scorer.sentence_vectors(queries)))
        return [float(scorer.compare_vectors(u[q], rows[f]).max()) if f in rows else 0.0 for q, f in pairs]

    return agree


def mine_report(store: FaqStore, *, since: datetime | None = None, min_score: float | None = None,
                low_score: float | None = None, min_cluster: int = 2, embed: Any = None,
                cosine: float | None = None, siamese: Any = None, min_agree: float | None = None,
                include_dismissed: bool = False) -> dict[str, Any]:
    """What `faq kb mine` reports: {"min_score", "stats", "phrasings": [...], "clusters": [...]};
    phrasing dicts also carry the FAQ's current answer and tags (import needs them). `siamese`: a
    SiameseScorer whose probability >= `min_agree` also confirms a confident match (`siamese_agreement`).

    Every item carries its `review_key` (app/store/reviews.py). Items an owner dismissed (the console's
    review queues) are left out unless `include_dismissed`, and counted in stats. A cluster's queries
    that have since become phrasings of some FAQ (a draft made from it was saved) are left out too."""
    min_score = DEFAULT_MIN_SCORE if min_score is None else min_score
    min_agree = DEFAULT_MIN_AGREE if min_agree is None else min_agree
    faqs: dict[str, tuple[str, list[str], list[str]]] = {}
    for r in store.faqs.export_records():
        faqs.setdefault(r.faq_id, (r.answer or "", list(r.tags or []), []))[2].append(r.question)
    # small talk ("thanks", "hi") was answered as such: it is neither a phrasing of an FAQ nor a gap in the KB
    log = [LoggedQuery(r["query"], r["faq_id"], r["score"], r["feedback_correct"], r["feedback_faq_id"])
           for r in store.query_log.read_query_log(since) if r.get("decision") != "chitchat"]
    stats = MiningStats()
    kb = {f: v[2] for f, v in faqs.items()}
    agree = siamese_agreement(siamese, kb) if siamese is not None else None
    proposals = mine_phrasings(log, kb, min_score, stats, agree=agree, min_agree=min_agree)
    clusters = cluster_unanswered(log, low_score=low_score, min_size=min_cluster, embed=embed,
                                  cosine=0.0 if cosine is None else cosine)
    known = {phrasing_form(q) for qs in kb.values() for q in qs}
    clusters = [c for c in (_without(c, known) for c in clusters) if c.size >= min_cluster]
    phrasings = [{**p.as_dict(), "answer": faqs[p.faq_id][0], "tags": faqs[p.faq_id][1],
                  "review_key": phrasing_key(p.faq_id, p.question)} for p in proposals]
    phrasings = _with_suggestions(phrasings, store, faqs)
    cluster_rows = [{**c.as_dict(), "review_key": cluster_key(c.key)} for c in clusters]
    report = {"min_score": min_score, "min_agree": min_agree if siamese is not None else None,
              "stats": {**stats.as_dict(), "unanswered_in_clusters": sum(c["size"] for c in cluster_rows),
                        "dismissed_phrasings": 0, "dismissed_clusters": 0},
              "phrasings": phrasings,
              "clusters": [{"faq_id": f"new-{i}", **c} for i, c in enumerate(cluster_rows, start=1)]}
    return report if include_dismissed else drop_dismissed(store, report)


def _with_suggestions(phrasings: list[dict[str, Any]], store: FaqStore,
                      faqs: dict[str, tuple[str, list[str], list[str]]]) -> list[dict[str, Any]]:
    """The mined phrasings and the imported suggestions (app/store/suggestions.py) still open: of an FAQ
    that exists, not yet one of its phrasings; one mined from the log too gets the evidence `imported`."""
    by_key = {p["review_key"]: p for p in phrasings}
    out = list(phrasings)
    for s in suggested_open(store, faqs):
        if s.key in by_key:
            by_key[s.key]["evidence"] = {**by_key[s.key]["evidence"], "imported": 1}
            continue
        answer, tags, _ = faqs[s.faq_id]
        out.append({"faq_id": s.faq_id, "question": s.question, "count": 0, "evidence": {"imported": 1},
                    "score_max": None, "score_mean": None, "matched_phrasing": None, "origin": s.origin,
                    "answer": answer, "tags": tags, "review_key": s.key})
    return out


def suggested_open(store: FaqStore, faqs: dict[str, tuple[str, list[str], list[str]]] | None = None) -> list[Any]:
    """The imported suggestions not yet phrasings of their FAQ (which still exists); dismissed ones too
    (`drop_dismissed` takes those out of the queue; the export leaves them out by the same keys)."""
    if faqs is None:
        faqs = {}
        for r in store.faqs.export_records():
            faqs.setdefault(r.faq_id, (r.answer or "", list(r.tags or []), []))[2].append(r.question)
    known = {(f, phrasing_form(q)) for f, v in faqs.items() for q in v[2]}
    return [s for s in store.suggestions.all()
            if s.faq_id in faqs and (s.faq_id, phrasing_form(s.question)) not in known]


def drop_dismissed(store: FaqStore, report: dict[str, Any]) -> dict[str, Any]:
    """`report` (of `mine_report(include_dismissed=True)`) less what an owner dismissed, counted in stats."""
    gone_p, gone_c = store.reviews.dismissed_keys("phrasing"), store.reviews.dismissed_keys("cluster")
    phrasings = [p for p in report["phrasings"] if p["review_key"] not in gone_p]
    clusters = [c for c in report["clusters"] if c["review_key"] not in gone_c]
    stats = {**report["stats"], "unanswered_in_clusters": sum(c["size"] for c in clusters),
             "dismissed_phrasings": len(report["phrasings"]) - len(phrasings),
             "dismissed_clusters": len(report["clusters"]) - len(clusters)}
    return {**report, "stats": stats, "phrasings": phrasings, "clusters": clusters}


def _without(cluster: Cluster, known: set[str]) -> Cluster:
    """The cluster less the queries that are now phrasings of some FAQ."""
    kept = Counter({q: n for q, n in cluster.queries.items() if phrasing_form(q) not in known})
    return cluster if len(kept) == len(cluster.queries) else Cluster(cluster.key, kept)


def write_mined(report: dict[str, Any], phrasings_path: str | None, clusters_path: str | None) -> None:
    """Phrasings as importable KB rows (answer/tags first-class, review fields alongside); clusters as
    one row per distinct query under their placeholder faq_id, without an answer."""
    if phrasings_path:
        with open(phrasings_path, "w", encoding="utf-8") as fh:
            for p in report["phrasings"]:
                row = {"faq_id": p["faq_id"], "question": p["question"], "answer": p["answer"], "tags": p["tags"],
                       **{k: v for k, v in p.items() if k not in ("faq_id", "question", "answer", "tags")}}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    if clusters_path:
        with open(clusters_path, "w", encoding="utf-8") as fh:
            for c in report["clusters"]:
                for q in c["queries"]:
                    fh.write(json.dumps({"faq_id": c["faq_id"], "question": q["query"], "count": q["count"],
                                         "cluster_size": c["size"], "key": c["key"]}, ensure_ascii=False) + "\n")
