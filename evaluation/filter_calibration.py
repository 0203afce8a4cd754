"""Is the score honest when a filter hides the question's own FAQ?

    faq eval filter-calibration [--encoder mpnet] [--work runs/turns] [--out bench/results/filter_calibration]

Each realistic set's in-scope test queries are matched through the product path (`scratch_pipeline`) twice
with a tag filter: once with a tag of the right FAQ (it passes), once with a tag it lacks (every candidate
is wrong; a tag that keeps at least three FAQs). Reported per case: top-1, the answer rate, answers that
are wrong, and the expected calibration error of the top score as the probability that the top FAQ is
right, for both cases together.
"""
from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timezone
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
SETS = ("campus_it", "council", "energy", "grocery")


def run(encoder: str, work: Path, seed: int = 0, split: str = "test") -> dict:
    from app.match import MatchQuery
    from app.settings import get_settings
    from evaluation.machine import cpu_info
    from evaluation.measures import reliability
    from evaluation.scratch import scratch_pipeline
    from evaluation.turns import merged_records
    from kb.filters import parse_filter

    rng = random.Random(seed)
    cases: dict[str, dict] = {c: {"n": 0, "top1": 0, "answered": 0, "wrong_answers": 0} for c in ("inside", "outside")}
    scores, right = [], []
    for name in SETS:
        records = merged_records(name)
        tags: dict[str, set[str]] = {}
        for r in records:
            if r.tags:
                tags.setdefault(r.faq_id, set()).update(r.tags)
        by_tag: dict[str, set[str]] = {}
        for f, ts in tags.items():
            for t in ts:
                by_tag.setdefault(t, set()).add(f)
        usable = sorted(t for t, fs in by_tag.items() if len(fs) >= 3)
        scratch = scratch_pipeline(records, workdir=work / name, settings=get_settings(), spec=encoder, cache_size=0,
                                   fingerprint={"kb": name, "encoder": encoder, "purpose": "turns"})
        queries = [json.loads(line) for line in (DATA / name / f"{split}.jsonl").read_text().splitlines() if line.strip()]
        requests, labels = [], []
        for q in queries:
            gold = q.get("faq_id")
            if not gold or gold not in tags:
                continue
            inside = sorted(t for t in tags[gold] if t in usable)
            outside = [t for t in usable if gold not in by_tag[t]]
            for case, pool in (("inside", inside), ("outside", outside)):
                if pool:
                    flt = parse_filter({"all": [{"tag": rng.choice(pool)}]})
                    requests.append(MatchQuery(q["query"], top_k=5, threshold=None, filter=flt))
                    labels.append((case, gold))
        for (case, gold), result in zip(labels, scratch.pipeline.match_many(requests)):
            cell = cases[case]
            top = result.matches[0] if result.matches else None
            ok = top is not None and top.faq_id == gold
            cell["n"] += 1
            cell["top1"] += ok
            cell["answered"] += result.answer is not None
            cell["wrong_answers"] += result.answer is not None and result.answer.faq_id != gold
            scores.append(top.score if top else 0.0)
            right.append(ok)
            cell.setdefault("scores", []).append(top.score if top else 0.0)
            cell.setdefault("right", []).append(ok)
    for cell in cases.values():
        cell["ece"] = reliability(cell.pop("scores", []) or [0.0], cell.pop("right", []) or [False])[0]
        n = max(1, cell["n"])
        cell.update(top1_rate=cell["top1"] / n, answer_rate=cell["answered"] / n, wrong_answer_rate=cell["wrong_answers"] / n)
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(), "encoder": encoder,
            "sets": list(SETS), "split": split, "cases": cases, "ece_top_score": reliability(scores, right)[0]}


def markdown(report: dict) -> str:
    lines = [f"# Scores under a tag filter ({report['date']})", "", f"CPU: {report['cpu']}. Encoder {report['encoder']}; "
             f"sets {', '.join(report['sets'])} ({report['split']} split, in-scope queries).", "",
             "| the right FAQ | n | top-1 | answered | wrong answers | ECE |", "|---|---|---|---|---|---|"]
    for case, c in report["cases"].items():
        lines.append(f"| {case} the filter | {c['n']} | {c['top1_rate']:.3f} | {c['answer_rate']:.3f} | "
                     f"{c['wrong_answer_rate']:.3f} | {c['ece']:.3f} |")
    lines += ["", f"ECE of the top score, both cases: {report['ece_top_score']:.3f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encoder", default="mpnet")
    ap.add_argument("--work", default="runs/turns")
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", default="bench/results/filter_calibration")
    args = ap.parse_args(argv)
    report = run(args.encoder, Path(args.work), split=args.split)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
