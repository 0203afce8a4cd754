"""The first two steps: what a query asks for, then its candidate FAQs.

The query step: its filter as the build's selection, and its place in the conversation
(app/conversation/turns.py `plan_turn`: a follow-up prompt sent back, the context-only FAQs its previous FAQ
opens, an unknown previous FAQ). Its language is read once, on first use (`Item.language`): the service hands
its detection of the client's words in; evaluations that give none are detected there.

The candidates step: each query's FAQs from its arm's recall stage, scored by the build's curve.

    ANN (Annoy + delta segment + tombstones) or BM25 (tantivy, Elasticsearch) phrasing hits, inside the
    query's filter (index/candidates.py)
      -> answer evidence (builds whose KB has real answers, index/answers.py): FAQs recalled through their
         answers too, each FAQ's cosine mixed with its answer's: (1 - w) * phrasing + w * answer
      -> FAQ grouping and pooling: score = sigmoid(a * cos + b), the build's curve
      -> the FAQs the query may not be answered with dropped: context-only ones its previous FAQ does not
         open, and (the guarantee) any outside its filter
      -> rivals: with a filter, the FAQs outside it that beat the filter's best (the decision model's evidence)
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from app.conversation.turns import plan_turn
from app.match.arms import base_arm, uses_stages
from app.match.batch import Batch, Item, Step
from app.match.request import MatchQuery
from index.calibration import calibration_for
from index.candidates import RetrieverLike, answer_hits, deepen, group_hits, lexical_hits, retrieve_depth, variant_counts
from index.decision import WINDOW


class QueryStep(Step):
    name = "query"
    reads = ("request", "retriever")
    writes = ("selection", "plan")

    def run(self, batch: Batch) -> None:
        for item in batch.items:
            item.selection = item.request.selection(batch.retriever)
            item.plan = plan_turn(item.request.turn, item.request.query, batch.retriever)


#: the FAQs outside a filter that compete with its candidates in the decision model: at most this many, and
#: only those whose first-stage score beats the filter's best by the margin (chosen on the realistic sets' dev
#: queries, evaluation/filter_calibration.py: a filter usually keeps the right FAQ, so a near rival outside
#: it says little, while a clearly better one says the question is about something the filter hides)
RIVALS = 1
RIVAL_MARGIN = 0.1


class CandidatesStep(Step):
    name = "candidates"
    reads = ("request", "vec", "selection", "plan")
    writes = ("hits", "answer_cos", "floor", "open_hits", "matches", "rivals", "batch.served", "batch.weight",
              "batch.pool", "batch.decided")

    def run(self, batch: Batch) -> None:
        pipeline, retriever, items = batch.pipeline, batch.retriever, batch.items
        found = retrieve(pipeline, [i.request for i in items], batch.vecs, retriever, [i.selection for i in items])
        # after the search: a retriever that cannot search leaves the served build of the last one in place
        batch.served = pipeline.served(retriever)
        batch.weight = pipeline.served_answer_weight(retriever)
        cosines = retriever.answer_vectors.cosines(batch.vecs) if batch.weight > 0 else None
        for n, (item, hits) in enumerate(zip(items, found)):
            item.hits, item.answer_cos, item.floor = self.with_answers(batch, item, hits, cosines, n, item.selection)
        rows = [n for n, item in enumerate(items) if item.selection is not None and base_arm(item.request.arm) == "ann"
                and not uses_stages(item.request.arm) and pipeline.scoring == "model"]
        if rows:
            opened = retrieve(pipeline, [replace(items[n].request, filter=None) for n in rows], batch.vecs[rows],
                              retriever)
            for n, hits in zip(rows, opened):
                items[n].open_hits = self.with_answers(batch, items[n], hits, cosines, n, None)
        batch.pool = pipeline.served_pool(retriever)
        batch.decided = pipeline.scoring == "model" and pipeline.decider.reference(
            retriever, batch.pool, batch.weight, batch.served.decisions) is not None
        calibration = calibration_for(retriever.manifest, pipeline.encoder, batch.pool, batch.weight)
        # the ANN list holds every phrasing down to its lowest cosine, so a FAQ's phrasings missing from it
        # are known to score below it; BM25 candidates carry no such bound: pool over what was scored
        counts = variant_counts(retriever) if batch.pool > 1 else None
        for item in items:
            self.group(batch, item, calibration, counts)

    @staticmethod
    def with_answers(batch: Batch, item: Item, hits: list, cosines: np.ndarray | None, n: int,
                     selection: Any) -> tuple[list, dict[str, float] | None, float | None]:
        """(hits, each hit FAQ's answer cosine, the ANN list's floor): with answer evidence, the ANN arms'
        hits gain the FAQs recalled through their answers; the lexical arms keep BM25's, scored the same way."""
        if cosines is None:
            return hits, None, None
        request, vectors = item.request, batch.retriever.answer_vectors
        floor = None
        if base_arm(request.arm) == "ann":
            floor = min((h.cosine for h in hits), default=None)
            top_k = max(request.top_k, batch.pipeline.rerank_k) if uses_stages(request.arm) else request.top_k
            only = None if selection is None else selection.faq_ids
            hits = answer_hits(batch.retriever, vectors, cosines[n], batch.vecs[n], hits, top_k, only)
        row_of = vectors.row_of
        return hits, {f: float(cosines[n, row_of[f]]) for f in {h.faq_id for h in hits} if f in row_of}, floor

    @staticmethod
    def group(batch: Batch, item: Item, calibration: Any, counts: Any) -> None:
        """The query's FAQs, best first, deep enough for its stages or the decision model; its rivals."""
        request, answers = item.request, batch.retriever.answers
        depth = max(request.top_k, batch.pipeline.rerank_k) if uses_stages(request.arm) \
            else max(request.top_k, WINDOW if batch.decided else 0)
        grouped = group_hits(item.hits, answers, calibration, depth, pool=batch.pool,
                             counts=counts if base_arm(request.arm) == "ann" else None, answer_cos=item.answer_cos,
                             answer_weight=batch.weight, floor=item.floor)
        shut = item.shut
        if shut:  # before the stages and the decision: they judge only what may be answered
            grouped = [m for m in grouped if m.faq_id not in shut]
        if item.selection is not None:  # the search kept to the filter already; this is the guarantee
            grouped = [m for m in grouped if m.faq_id in item.selection.faq_ids]
        item.matches = grouped
        if item.open_hits is not None and batch.decided:
            hits, answer_cos, floor = item.open_hits
            best = grouped[0].score if grouped else 0.0
            item.rivals = [m for m in group_hits(hits, answers, calibration, RIVALS + 1, pool=batch.pool, counts=counts,
                                                 answer_cos=answer_cos, answer_weight=batch.weight, floor=floor)
                           if m.faq_id not in item.selection.faq_ids and m.faq_id not in shut
                           and m.score > best + RIVAL_MARGIN][:RIVALS]


def retrieve(pipeline: Any, requests: Sequence[MatchQuery], vecs: np.ndarray, retriever: RetrieverLike,
             selections: Sequence[Any] | None = None) -> list[list[Any]]:
    """Variant hits (with cosine) per query from its arm's recall stage: ANN, or BM25 candidates; each
    query inside its filter's selection (one search call per distinct filter)."""
    selections = list(selections) if selections is not None else [None] * len(requests)
    groups: dict[Any, list[int]] = {}
    for i, selection in enumerate(selections):
        groups.setdefault(None if selection is None else selection.key, []).append(i)
    if len(groups) > 1:
        hits: list[list[Any]] = [[] for _ in requests]
        for rows in groups.values():
            sub = retrieve(pipeline, [requests[i] for i in rows], vecs[rows], retriever, [selections[i] for i in rows])
            for i, found in zip(rows, sub):
                hits[i] = found
        return hits
    selection = selections[0] if selections else None
    hits = [[] for _ in requests]
    ann_rows = [i for i, r in enumerate(requests) if base_arm(r.arm) == "ann"]
    lexical_rows = [i for i, r in enumerate(requests) if base_arm(r.arm) == "lexical"]
    if len(ann_rows) + len(lexical_rows) != len(requests):
        unknown = sorted({r.arm for r in requests} - {"ann", "lexical", "ann+rerank", "lexical+rerank"})
        raise ValueError(f"unknown arm(s) {unknown}")
    if ann_rows:
        # a re-ranked arm needs rerank_k FAQs from its recall stage, whatever top_k it returns
        sub = [replace(requests[i], top_k=max(requests[i].top_k, pipeline.rerank_k)) if uses_stages(requests[i].arm)
               else requests[i] for i in ann_rows]
        sub_vecs = vecs if len(ann_rows) == len(requests) else vecs[ann_rows]
        k = max(retrieve_depth(r.top_k) for r in sub)
        first = retriever.search(sub_vecs, k) if selection is None else retriever.search(sub_vecs, k, selection)
        for i, found in zip(ann_rows, deepen(retriever, sub_vecs, [r.top_k for r in sub], first, k, selection)):
            hits[i] = found
    if lexical_rows:
        index = pipeline.lexical_index(retriever)
        k = max([pipeline.lexical_k] + [requests[i].top_k for i in lexical_rows])
        found = lexical_hits(index, retriever, [requests[i].query for i in lexical_rows], vecs[lexical_rows], k,
                             None if selection is None else selection.faq_ids)
        for i, row_hits in zip(lexical_rows, found):
            hits[i] = row_hits
    return hits
