"""The decision model (index/decision.py): gather its data, train it, measure it leave-one-KB-out.

    faq eval decision collect --data DIR [--kbs energy,council,...] [--model mpnet] --out var/decision
    faq eval decision loko --cache var/decision --out bench/results/decision
    faq eval decision train --cache var/decision --out index/decision_model.json  (= faq train decision)

`collect` puts each KB through the product's own path (a scratch store, `build_index`, the pipeline of
`build_pipeline` with the decision model off) and keeps, per labelled query, the first stage's
candidates as the model sees them, the build's reference and the replayed held-out phrasings and
background questions (pickled per KB and encoder). `loko` trains on every KB but one and scores the one
left out, for each KB: ECE, answer F1 at the default decision against the best threshold's, the stored
expected precision against the measured one, clarify, top-1; JSON, Markdown and a reliability diagram
per KB. `train` fits on all KBs and writes the model that ships: the trainer is training/decision.py
(`faq train decision`), which `loko` and `labels` train with too.

KBs: the realistic sets of evaluation/data (dev and test queries), the demo (its queries), CLINC150
(test, its `oos` queries out of scope) and BANKING77 (test), the last two prepared by `faq data prepare`
into DATA/clinc150 and DATA/banking77.
"""
from __future__ import annotations

import argparse
import json
import logging
import pickle
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from evaluation.measures import f1_score, reliability
from index.decision import WINDOW, DecisionModel, Reference, precision_table, threshold_for_precision
from training.decision import (
    ALL_KBS, REALISTIC, KbData, add_data_options, add_train_options, cache_path, design, load_kbs, top_of, train_decision,
    train_model,
)

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
#: the default decision the targets are measured at (FAQ_DEFAULT_THRESHOLD's default)
DEFAULT_THRESHOLD = 0.5


def kb_files(name: str, data: Path) -> tuple[Path, list[tuple[str, Path]]]:
    """(KB file, [(split, queries file)]) of a KB."""
    if name in REALISTIC:
        d = ROOT / "evaluation" / "data" / name
        return d / "faq.jsonl", [("dev", d / "dev.jsonl"), ("test", d / "test.jsonl")]
    if name == "demo":
        d = ROOT / "app" / "demo"
        return d / "faq.jsonl", [("test", d / "queries.jsonl")]
    d = data / name
    return d / "kb.jsonl", [("dev", d / "dev.jsonl"), ("test", d / "test.jsonl")]


def collect_kb(name: str, data: Path, model: str, batch_size: int = 128, max_queries: int = 3000,
               seed: int = 0) -> KbData:
    """One KB through the product path -> its `KbData` (queries sampled down to `max_queries` per split)."""
    from app.match.decider import Decider
    from app.match import MatchQuery
    from app.settings import get_settings
    from evaluation.scratch import scratch_pipeline
    from index.decision import KbView, read_background, replay, reference_key
    from kb.files import read_queries

    kb_path, splits = kb_files(name, data)
    work = Path(tempfile.mkdtemp(prefix="faq-decision-"))
    scratch = None
    try:
        scratch = scratch_pipeline(kb_path, workdir=work, settings=get_settings(), spec=model, batch_size=batch_size,
                                   progress=True, cache_size=0)
        store, encoder, retriever, pipeline = scratch.store, scratch.encoder, scratch.retriever, scratch.pipeline
        pipeline.decider = Decider(None)  # the first stage's candidates and its calibrated score, as before
        pool, weight = pipeline.served_pool(retriever), pipeline.served_answer_weight(retriever)
        key = reference_key(pool, weight)
        ref = Reference.from_json(retriever.manifest["decision"]["references"][key])
        rng = np.random.default_rng(seed)
        queries: list = []
        for split, path in splits:
            rows = read_queries(path)
            if len(rows) > max_queries:
                rows = [rows[i] for i in sorted(rng.choice(len(rows), max_queries, replace=False).tolist())]
            for start in range(0, len(rows), batch_size):
                batch = rows[start:start + batch_size]
                results = pipeline.match_many([MatchQuery(q.query, WINDOW, 0.5) for q in batch], retriever=retriever)
                for q, r in zip(batch, results):
                    cands = pipeline.decider.candidates(retriever, r.matches)
                    queries.append((q.query, cands, q.faq_id, split, r.matches[0].score if r.matches else 0.0))
            print(f"{name}: {split} {len(rows)} queries", file=sys.stderr)
        # the replayed held-out phrasings and background questions of the served (pool, weight)
        snap = store.snapshot()
        n = retriever.n_build_variants
        vectors = np.asarray(retriever.ann.item_vectors(list(range(n))), dtype=np.float32)
        view = KbView.build(vectors, retriever.build_faq_ids, retriever.build_questions, retriever.answer_vectors,
                            {f: a for f, (a, _) in snap.faqs.items()})
        background = read_background()
        played = replay(view, background, encoder.encode(background, batch_size=batch_size), pools=(pool,),
                        weights=(weight,))
        return KbData(name, model, pool, weight, ref, queries, played.queries[key])
    finally:
        if scratch is not None:
            scratch.close()
        shutil.rmtree(work, ignore_errors=True)


def ece(p: np.ndarray, right: np.ndarray, bins: int = 10) -> tuple[float, list[dict]]:
    return reliability(np.asarray(p).tolist(), np.asarray(right).astype(bool).tolist(), bins)


def answer_scores(p: np.ndarray, right: np.ndarray, in_scope: np.ndarray, t: float) -> dict:
    answered = p >= t
    correct = int((answered & right).sum())
    precision = correct / answered.sum() if answered.any() else 0.0
    recall = correct / max(int(in_scope.sum()), 1)
    f1 = f1_score(precision, recall)
    return {"threshold": float(t), "precision": float(precision), "recall": float(recall), "f1": float(f1),
            "answered": int(answered.sum())}


def best_threshold(p: np.ndarray, right: np.ndarray, in_scope: np.ndarray) -> dict:
    grid = sorted(set(np.round(p, 4).tolist()) | {0.0})
    return max((answer_scores(p, right, in_scope, t) for t in grid), key=lambda r: (r["f1"], -r["threshold"]))


def evaluate_kb(model: DecisionModel | None, kb: KbData, split: str | None, threshold: float | None,
                target_precision: float | None, oos_share: float, clarify_min: float) -> dict:
    """The model's decisions on a KB's labelled queries (`split`, None: all)."""
    rows = [q for q in kb.queries if split is None or q[3] == split]
    golds = [g for _, _, g, _, _ in rows]
    in_scope = np.array([g is not None for g in golds])
    first = np.array([bool(c) and c[0].faq_id == g for _, c, g, _, _ in rows])
    platt = np.array([s for *_, s in rows])
    tops, ps, options = [], [], []
    for text, cands, _gold, _, _ in rows:
        ids, p = top_of(model, text, cands, kb.reference)
        tops.append(ids[0] if ids else None)
        ps.append(float(p[0]) if len(p) else 0.0)
        options.append([(i, float(x)) for i, x in zip(ids[:3], p[:3]) if x >= clarify_min])
    p = np.array(ps)
    right = np.array([t is not None and t == g for t, g in zip(tops, golds)])
    # the build's stored table with this model, from its replayed held-out phrasings and background
    rp = np.array([top_of(model, t, c, kb.reference)[1][:1].max(initial=0.0) for t, c, _ in kb.replay])
    held = np.array([own is not None for _, _, own in kb.replay])
    table = precision_table(rp[held], rp[~held], oos_share)
    if threshold is None:
        threshold = threshold_for_precision(table, target_precision) if target_precision else DEFAULT_THRESHOLD
        threshold = 1.0 if threshold is None else threshold
    at = answer_scores(p, right, in_scope, threshold)
    stored = next((r["expected_precision"] for r in reversed(table) if r["threshold"] <= threshold + 1e-9), None)
    clar = [(o, g) for (o, g, x) in zip(options, golds, p) if x < threshold and len(o) >= 2
            and sum(v for _, v in o) >= threshold]
    n_in = int(in_scope.sum())
    clar_in = sum(g is not None for _, g in clar)
    ece_v, bins = ece(p, right.astype(float))
    ece_platt, _ = ece(platt, first.astype(float))
    # what a perfectly calibrated model would show on this many queries: labels drawn from its own p
    rng = np.random.default_rng(0)
    floor = float(np.mean([ece(p, (rng.random(len(p)) < p).astype(float))[0] for _ in range(200)]))
    return {
        "kb": kb.name, "split": split or "all", "n": len(rows), "n_in_scope": n_in, "n_out_of_scope": len(rows) - n_in,
        "top1_first_stage": float(first[in_scope].mean()) if n_in else None,
        "top1": float(right[in_scope].mean()) if n_in else None,
        "ece": ece_v, "ece_first_stage_calibration": ece_platt, "ece_noise_floor": floor, "reliability": bins,
        "at_default": at, "best": best_threshold(p, right, in_scope),
        "first_stage_at_0.5": answer_scores(platt, first, in_scope, 0.5),
        "first_stage_best": best_threshold(platt, first, in_scope),
        "stored_expected_precision": stored,
        # what the service shows once the build has traffic: the mean score of the answered queries, no labels
        "traffic_expected_precision": float(p[p >= threshold].mean()) if (p >= threshold).any() else None,
        "clarify": {"n": len(clar), "share_of_in_scope": clar_in / max(n_in, 1),
                    "right_among_options": (sum(any(i == g for i, _ in o) for o, g in clar if g is not None)
                                            / max(clar_in, 1)) if clar else None,
                    "out_of_scope": len(clar) - clar_in},
        "table": table, "_p": p.tolist(), "_right": right.tolist(),
    }


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------
def cmd_collect(args: argparse.Namespace) -> int:
    cache = Path(args.out)
    cache.mkdir(parents=True, exist_ok=True)
    for name in args.kbs.split(","):
        out = cache_path(cache, name, args.model)
        if out.is_file() and not args.force:
            print(f"{name}: already collected ({out})", file=sys.stderr)
            continue
        t = time.perf_counter()
        kb = collect_kb(name, Path(args.data), args.model, max_queries=args.max_queries)
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(kb))
        tmp.replace(out)  # an interrupted run leaves no half file: re-running resumes
        print(f"{name}: {len(kb.queries)} queries, {len(kb.replay)} replayed in {time.perf_counter() - t:.0f}s -> {out}",
              file=sys.stderr)
    return 0


def loko(kbs: Sequence[KbData], args: argparse.Namespace, train_kbs: Sequence[KbData] | None = None) -> list[dict]:
    """Each KB of `kbs` scored by a model trained on the others (`train_kbs`, default `kbs`: the same
    names of other encoders' caches are left out too)."""
    out = []
    for kb in kbs:
        rest = [k for k in (train_kbs or kbs) if k.name != kb.name]
        split = None if args.all_queries or not any(q[3] == "test" for q in kb.queries) else "test"
        reports = {}
        for rerank in (False, True):
            model = train_model(rest, rerank, recalibrate=args.recalibrate)
            reports[rerank] = evaluate_kb(model, kb, split, args.threshold, args.target_precision, args.oos_share,
                                          args.clarify_min)
        r = reports[args.rerank]
        r["top1_without_rerank"], r["top1_with_rerank"] = reports[False]["top1"], reports[True]["top1"]
        out.append(r)
    return out


def write_reports(rows: list[dict], out: Path, title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    clean = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    (out / "decision_loko.json").write_text(json.dumps(clean, indent=1) + "\n", encoding="utf-8")
    lines = [f"# {title}", "", "| KB | n (oos) | ECE (first-stage curve; noise floor) | F1 default / best | precision default | "
             "stored exp. precision (from traffic) | answered | clarify share / right | top-1 first stage / model (rerank) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["clarify"]
        lines.append(
            f"| {r['kb']} | {r['n']} ({r['n_out_of_scope']}) | {r['ece']:.3f} ({r['ece_first_stage_calibration']:.3f}; "
            f"{r['ece_noise_floor']:.3f}) | "
            f"{r['at_default']['f1']:.3f} / {r['best']['f1']:.3f} | {r['at_default']['precision']:.3f} | "
            f"{r['stored_expected_precision'] if r['stored_expected_precision'] is not None else '-'} "
            f"({'-' if r['traffic_expected_precision'] is None else format(r['traffic_expected_precision'], '.3f')}) | "
            f"{r['at_default']['answered']} | {c['share_of_in_scope']:.3f} / "
            f"{'-' if c['right_among_options'] is None else format(c['right_among_options'], '.2f')} | "
            f"{r['top1_first_stage']:.3f} / {r['top1_without_rerank']:.3f} ({r['top1_with_rerank']:.3f}) |")
    (out / "decision_loko.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for r in rows:
        fig, ax = plt.subplots(figsize=(4, 4))
        xs = [b["mean_p"] for b in r["reliability"]]
        ys = [b["accuracy"] for b in r["reliability"]]
        ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
        ax.plot(xs, ys, marker="o")
        for x, y_, b in zip(xs, ys, r["reliability"]):
            ax.annotate(str(b["n"]), (x, y_), fontsize=7, xytext=(3, -8), textcoords="offset points")
        ax.set_xlabel("score of the top answer")
        ax.set_ylabel("share right")
        ax.set_title(f"{r['kb']} ({r['split']}): ECE {r['ece']:.3f}")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        fig.tight_layout()
        fig.savefig(out / f"reliability_{r['kb']}.png", dpi=90)
        plt.close(fig)


def cmd_loko(args: argparse.Namespace) -> int:
    kbs = load_kbs(Path(args.cache), args.kbs.split(","), args.model)
    train = [k for m in args.train_models.split(",") for k in load_kbs(Path(args.cache), args.kbs.split(","), m)] \
        if args.train_models else None
    rows = loko(kbs, args, train)
    write_reports(rows, Path(args.out), f"Decision model, leave-one-KB-out ({args.model}; trained on "
                                        f"{args.train_models or args.model})")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    return train_decision(args, "faq eval decision " + " ".join(args.argv))


LABEL_COUNTS = (0, 25, 50, 100, 200)


def labels_curve(kbs: Sequence[KbData], train_kbs: Sequence[KbData], strength: float, seeds: int = 5,
                 clarify_min: float = 0.25) -> list[dict]:
    """For each KB: the cross-KB model trained without it, refitted (`index.decision.refit`) on n of its dev
    queries as feedback labels would be, scored on its test queries; n in LABEL_COUNTS, mean over seeds."""
    from index.decision import refit

    out = []
    for kb in kbs:
        dev = [q for q in kb.queries if q[3] == "dev"]
        if not dev or not any(q[3] == "test" for q in kb.queries):
            continue
        prior = train_model([k for k in train_kbs if k.name != kb.name], rerank=True)
        for n in LABEL_COUNTS:
            if n > len(dev):
                break
            runs = []
            for seed in range(seeds if n else 1):
                rng = np.random.default_rng(seed)
                picked = [dev[i] for i in rng.choice(len(dev), n, replace=False)] if n else []
                model = prior
                if picked:
                    part = KbData(kb.name, kb.encoder, kb.pool, kb.weight, kb.reference, picked, [])
                    X, y, _ = design([part])
                    model = refit(prior, X, y, strength)
                r = evaluate_kb(model, kb, "test", DEFAULT_THRESHOLD, None, 0.2, clarify_min)
                runs.append((r["at_default"]["f1"], r["ece"], r["top1"]))
            f1, e, t1 = np.mean(runs, axis=0)
            out.append({"kb": kb.name, "labels": n, "f1": float(f1), "ece": float(e), "top1": float(t1),
                        "seeds": len(runs), "strength": strength})
            print(f"{kb.name}: {n} labels -> F1 {f1:.3f} ECE {e:.3f} top-1 {t1:.3f}", file=sys.stderr)
    return out


def cmd_labels(args: argparse.Namespace) -> int:
    kbs = load_kbs(Path(args.cache), args.kbs.split(","), args.model)
    train = [k for m in (args.train_models or args.model).split(",") for k in load_kbs(Path(args.cache), args.kbs.split(","), m)]
    rows = labels_curve(kbs, train, args.strength, args.seeds, args.clarify_min)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "labels_curve.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    names = list(dict.fromkeys(r["kb"] for r in rows))
    lines = [f"# F1 and ECE against the number of a KB's own labels (prior strength {args.strength:g})", "",
             "| KB | " + " | ".join(f"{n} labels: F1 / ECE" for n in LABEL_COUNTS) + " |",
             "|---|" + "---|" * len(LABEL_COUNTS)]
    for name in names:
        cells = {r["labels"]: f"{r['f1']:.3f} / {r['ece']:.3f}" for r in rows if r["kb"] == name}
        lines.append(f"| {name} | " + " | ".join(cells.get(n, "-") for n in LABEL_COUNTS) + " |")
    (out / "labels_curve.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for name in names:
        pts = [r for r in rows if r["kb"] == name]
        a1.plot([r["labels"] for r in pts], [r["f1"] for r in pts], marker="o", label=name)
        a2.plot([r["labels"] for r in pts], [r["ece"] for r in pts], marker="o", label=name)
    a1.set_xlabel("labels")
    a1.set_ylabel("answer F1 at 0.5 (test)")
    a2.set_xlabel("labels")
    a2.set_ylabel("ECE (test)")
    a1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "labels_curve.png", dpi=90)
    plt.close(fig)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="faq eval decision", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="KBs through the product path -> cached candidates")
    c.add_argument("--data", default="var/data", help="folder with clinc150/ and banking77/ from `faq data prepare`")
    c.add_argument("--kbs", default=",".join(ALL_KBS))
    c.add_argument("--model", default="mpnet")
    c.add_argument("--out", default="var/decision")
    c.add_argument("--max-queries", type=int, default=3000, help="per split, sampled (seeded)")
    c.add_argument("--force", action="store_true", help="collect KBs already in the cache again")
    c.set_defaults(func=cmd_collect)
    for name, func in (("loko", cmd_loko), ("train", cmd_train), ("labels", cmd_labels)):
        p = sub.add_parser(name)
        (add_train_options if name == "train" else add_data_options)(p)
        p.set_defaults(func=func)
    lk = sub.choices["loko"]
    lk.add_argument("--out", default="bench/results/decision")
    lk.add_argument("--threshold", type=float, default=None, help="default: --target-precision, else 0.5")
    lk.add_argument("--target-precision", type=float, default=None)
    lk.add_argument("--oos-share", type=float, default=0.2)
    lk.add_argument("--all-queries", action="store_true", help="score the left-out KB's dev and test queries")
    lb = sub.choices["labels"]
    lb.add_argument("--out", default="bench/results/decision_labels")
    lb.add_argument("--strength", type=float, default=100.0, help="the prior's weight in labelled queries")
    lb.add_argument("--seeds", type=int, default=5)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # recorded in what `train` writes, as `faq eval decision ARGS`
    logging.basicConfig(level=logging.WARNING)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
