"""What the review queue's mined phrasings are worth on realistic FAQ sets: an owner labels what users
asked (Try a question's "the right FAQ is", or `POST /feedback {"faq_id"}`), accepts the phrasings the
queue then proposes, and rebuilds. Measured per set of evaluation/data (users' words), never tuned on
the test queries:

1. the KB as shipped, through the product path (import, MiniLM build, the served decision): test top-1
   (in-scope queries), and at the served decision the answer rate and the precision of answers;
2. the dev queries replayed as traffic and logged as `/match` logs them, each with the feedback an owner
   would give: the FAQ that answers it (out-of-scope queries: "wrong" when something was answered);
3. the review queue (`app/curation/mining.py mine_report`, what the console shows) and every proposal accepted as
   the console accepts it (`KbStore.add_questions`); then the KB rebuilt and the test queries again.

    faq eval review-loop [--sets energy,council,campus_it,grocery] [--out bench/results/review_loop]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from evaluation.measures import answer_metrics, outcomes_from_results, top1_accuracy

REPO = Path(__file__).resolve().parent.parent
SETS = ("energy", "council", "campus_it", "grocery")


def queries(name: str, split: str) -> list[tuple[str, str | None]]:
    path = REPO / "evaluation" / "data" / name / f"{split}.jsonl"
    return [(r["query"], r["faq_id"]) for r in map(json.loads, open(path, encoding="utf-8"))]


def score(pipeline: Any, test: list[tuple[str, str | None]]) -> dict[str, Any]:
    results = pipeline.match([q for q, _ in test], top_k=5)
    outcomes = outcomes_from_results(results, [g for _, g in test])
    answers = answer_metrics(outcomes)
    in_scope = [r for r, (_, g) in zip(results, test) if g is not None]
    return {"top1": round(top1_accuracy(outcomes), 4), "answer_rate_in_scope": round(
        sum(r.answer is not None for r in in_scope) / len(in_scope), 4),
        "answered": answers["n_answered"],
        "answer_precision": round(answers["answer_precision"], 4) if answers["n_answered"] else None}


POLICIES = ("all", "misses")


def run_set(name: str, encoder: Any, work: Path, policy: str = "all") -> dict[str, Any]:
    """`policy`: accept every proposal ("all"), or only those whose query the served build got wrong
    (no answer, or another FAQ: "misses")."""
    from app.curation.mining import mine_report
    from evaluation.scratch import scratch_pipeline

    dev, test = queries(name, "dev"), queries(name, "test")
    t0 = time.perf_counter()
    first = scratch_pipeline(REPO / "evaluation" / "data" / name / "faq.jsonl", workdir=work / "before",
                             encoder=encoder, spec="minilm", cache_size=0)
    before = score(first.pipeline, test)
    rows = []
    for (q, gold), r in zip(dev, first.pipeline.match([q for q, _ in dev], top_k=5)):
        best = r.matches[0] if r.matches else None
        answered = r.answer.faq_id if r.answer else None
        feedback = ({"feedback_faq_id": gold} if gold is not None
                    else {"feedback_correct": False} if answered is not None else {})
        rows.append({"request_id": uuid.uuid4().hex, "arm": "ann", "query": q, "faq_id": answered,
                     "score": best.score if best else None, "decision": r.decision, **feedback})
    first.store.log_queries(rows)
    report = mine_report(first.store)
    missed = {(r["query"], r["feedback_faq_id"]) for r in rows
              if r.get("feedback_faq_id") is not None and r["faq_id"] != r["feedback_faq_id"]}
    from kb.mining import phrasing_form

    missed_forms = {(phrasing_form(q), f) for q, f in missed}
    added = 0
    for p in report["phrasings"]:
        if policy == "misses" and (phrasing_form(p["question"]), p["faq_id"]) not in missed_forms:
            continue
        added += first.store.faqs.add_questions(p["faq_id"], [p["question"]])[1]
    records = list(first.store.export_records())
    first.close()
    second = scratch_pipeline(records, workdir=work / "after", encoder=encoder, spec="minilm", cache_size=0)
    after = score(second.pipeline, test)
    second.close()
    return {"dev_queries": len(dev), "test_queries": len(test), "proposed": len(report["phrasings"]),
            "accepted": added, "clusters": len(report["clusters"]), "before": before, "after": after,
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--out", default="bench/results/review_loop")
    args = ap.parse_args(argv)
    import torch

    from app.settings import Settings
    from evaluation.machine import cpu_info
    from models.encoders.load import load_encoder

    torch.set_num_threads(2)
    encoder = load_encoder("minilm", runtime="onnx-int8", device="cpu", cache_dir=Settings().mpnet_cache)
    result: dict[str, Any] = {"machine": cpu_info(), "encoder": "minilm (onnx-int8)", "sets": {}}
    with tempfile.TemporaryDirectory(prefix="review-loop-") as tmp:
        for policy in POLICIES:
            for name in args.sets.split(","):
                result["sets"][f"{name} ({policy})"] = r = run_set(name, encoder, Path(tmp) / policy / name, policy)
                print(name, policy, json.dumps(r))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    lines = ["# The review loop on realistic FAQ sets", "",
             f"`faq eval review-loop --sets {args.sets}`; MiniLM (onnx-int8), CPU "
             f"{result['machine'].get('cpu_model')}. Dev queries labelled and their proposals accepted; test queries "
             "before and after.", "",
             "| set (accepted) | dev labelled | accepted | test top-1 before → after | answer rate (in scope) before → after "
             "| answer precision before → after |", "|---|---|---|---|---|---|"]
    for name, r in result["sets"].items():
        b, a = r["before"], r["after"]
        lines.append(f"| {name} | {r['dev_queries']} | {r['accepted']} | {b['top1']:.3f} → {a['top1']:.3f} "
                     f"| {b['answer_rate_in_scope']:.3f} → {a['answer_rate_in_scope']:.3f} "
                     f"| {b['answer_precision'] or 0:.3f} → {a['answer_precision'] or 0:.3f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
