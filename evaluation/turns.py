"""The turn model (index/turns.py): fit it on the realistic sets' labelled second turns, and measure it.

    faq eval turns fit [--encoder mpnet] [--work runs/turns] [--out index/turn_model.json]
    faq eval turns measure [--encoder mpnet] [--work runs/turns] [--split test]

Each set's KB goes through the product path (`scratch_pipeline`, its follow-ups merged in); every second
turn of `turns.jsonl` whose first turn names an FAQ is matched alone by the served pipeline, and the turn
model's candidates are read from that result exactly as the pipeline reads them (`Pipeline.turn_candidates`).
`fit` uses the dev split of all sets; `measure` reports top-1 alone and in context per kind of second turn,
and the calibration (ECE) of the in-context top score. A second turn labelled out of scope is right when
nothing reaches the threshold.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "evaluation" / "data"
SETS = ("campus_it", "council", "energy", "grocery")
THRESHOLD = 0.5


def follow_ups(name: str) -> dict[str, list[dict]]:
    """The set's follow_ups.jsonl: faq_id -> the prompts an editor would attach to it."""
    path = DATA / name / "follow_ups.jsonl"
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["faq_id"]: row["follow_ups"] for row in rows}


def merged_records(name: str) -> list:
    """The set's KB with its follow-ups on each FAQ's first line."""
    from kb.files import read_kb

    prompts, seen, out = follow_ups(name), set(), []
    for r in read_kb(DATA / name / "faq.jsonl"):
        if r.faq_id not in seen and r.faq_id in prompts:
            r = replace(r, follow_ups=prompts[r.faq_id])
        seen.add(r.faq_id)
        out.append(r)
    return out


def collect(encoder: str, work: Path, split: str, sets=SETS) -> list[dict]:
    """One entry per second turn of `split`: its kind, gold FAQ, the query-alone ranking and the turn
    model's candidates (ids, features)."""
    from app.match import MatchQuery
    from app.settings import get_settings
    from app.conversation.turns import Turn, plan_turn
    from evaluation.scratch import scratch_pipeline
    from index.decision import WINDOW

    out = []
    for name in sets:
        records = merged_records(name)
        scratch = scratch_pipeline(records, workdir=work / name, settings=get_settings(), spec=encoder, cache_size=0,
                                   fingerprint={"kb": name, "encoder": encoder, "purpose": "turns"})
        pipeline, retriever = scratch.pipeline, scratch.retriever
        pipeline.turn_model = None  # the query alone, as the model's inputs
        turns = [json.loads(line) for line in (DATA / name / "turns.jsonl").read_text().splitlines() if line.strip()]
        turns = [t for t in turns if t["split"] == split and t["first"]["faq_id"]]
        queries = [t["second"]["query"] for t in turns]
        results = pipeline.match_many([MatchQuery(q, top_k=WINDOW, threshold=THRESHOLD) for q in queries])
        vecs = pipeline.encode(queries)
        hidden = retriever.context_only
        for t, result, vec in zip(turns, results, vecs):
            previous = t["first"]["faq_id"]
            plan = plan_turn(Turn(previous, t["first"]["query"]), t["second"]["query"], retriever)
            shut = hidden - plan.prompted if plan.prompted else hidden
            found = pipeline.turn_candidates(t["second"]["query"], previous, result.matches, retriever, vec,
                                             None, shut, plan.prompted)
            out.append({"set": name, "kind": t["kind"], "gold": t["second"]["faq_id"], "previous": previous,
                        "alone": [(m.faq_id, m.score) for m in result.matches if m.faq_id not in shut],
                        "ids": [] if found is None else found.faq_ids,
                        "x": np.zeros((0, 0)) if found is None else found.x})
    return out


def fit(rows: list[dict], l2: float = 0.1):
    from training.turns import fit_turn_model

    turns = [(r["x"], r["ids"].index(r["gold"]) if r["gold"] in r["ids"] else -1) for r in rows]
    meta = {"trained_on": {"turns": len(rows), "sets": sorted({r["set"] for r in rows}),
                           "gold_among_candidates": sum(r["gold"] in r["ids"] for r in rows if r["gold"])}}
    return fit_turn_model(turns, l2, meta)


def measure(rows: list[dict], model) -> dict:
    from evaluation.measures import reliability

    cells: dict = defaultdict(lambda: {"n": 0, "alone": 0, "context": 0})
    probs, right = [], []
    for r in rows:
        gold = r["gold"]
        top_alone = r["alone"][0] if r["alone"] else (None, 0.0)
        alone_ok = (top_alone[0] == gold) if gold else top_alone[1] < THRESHOLD
        if len(r["ids"]):
            p = model.prob(r["x"])
            best = int(np.argmax(p))
            top, score = r["ids"][best], float(p[best])
        else:
            top, score = top_alone
        ctx_ok = (top == gold) if gold else score < THRESHOLD
        probs.append(score)
        right.append(top == gold if gold else False)
        for key in (r["kind"], "all"):
            cells[key]["n"] += 1
            cells[key]["alone"] += alone_ok
            cells[key]["context"] += ctx_ok
    out = {k: {**v, "alone_rate": v["alone"] / v["n"], "context_rate": v["context"] / v["n"]} for k, v in cells.items()}
    return {"cells": out, "ece_top": reliability(probs, right)[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("fit", "measure"))
    ap.add_argument("--encoder", default="mpnet")
    ap.add_argument("--work", default="runs/turns")
    ap.add_argument("--split", default=None, help="default: dev to fit, test to measure")
    ap.add_argument("--l2", type=float, default=0.1)
    ap.add_argument("--model", default=None, help="measure: a turn model file (default: the shipped one)")
    ap.add_argument("--out", default=None, help="fit: where to write the model (default: index/turn_model.json)")
    args = ap.parse_args(argv)
    from index.turns import MODEL_FILE, load_turn_model

    split = args.split or ("dev" if args.command == "fit" else "test")
    rows = collect(args.encoder, Path(args.work), split)
    if args.command == "fit":
        model = fit(rows, args.l2)
        model.save(args.out or MODEL_FILE)
        print(json.dumps({"fitted_on": split, **model.meta, "on_its_own_data": measure(rows, model)}, indent=1))
        return 0
    model = load_turn_model(args.model)
    if model is None:
        print("no turn model: run `faq eval turns fit`", file=sys.stderr)
        return 2
    print(json.dumps({"split": split, **measure(rows, model)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
