"""How close must two unanswered queries be to count as one question? The review queues merge groups of
unanswered queries whose most frequent wordings have encoder cosine >= app/curation/review.py CLUSTER_COSINE.
This checks that threshold on the realistic FAQ sets of evaluation/data (users' own words, dev + test
queries, gold FAQ or out of scope), per encoder:

- every pair of distinct queries at or above each cosine: how many, and how many name the same FAQ
  (a right merge), different FAQs or an FAQ and out of scope (a wrong merge), or are both out of scope
  (unknown: out-of-scope queries share no label);
- the clusters the queue would show if none of the queries had been answered (kb/mining.py
  `cluster_unanswered`, min size 2): how many, how many queries in them, and how many mix FAQs.

    faq eval cluster-cosine [--encoders minilm,mpnet] [--out bench/results/cluster_cosine]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SETS = ("energy", "council", "campus_it", "grocery")
COSINES = (0.6, 0.7, 0.75, 0.8, 0.85, 0.9)


def load(name: str) -> list[tuple[str, str | None]]:
    folder = REPO / "evaluation" / "data" / name
    rows = [json.loads(line) for f in ("dev.jsonl", "test.jsonl") for line in open(folder / f, encoding="utf-8")]
    seen: dict[str, str | None] = {}
    for r in rows:  # a query asked twice is one query here: pairs are between different wordings
        seen.setdefault(" ".join(r["query"].split()), r["faq_id"])
    return list(seen.items())


def pair_counts(vectors: Any, gold: list[str | None], cosines: tuple[float, ...]) -> list[dict[str, Any]]:
    import numpy as np

    sims = vectors @ vectors.T
    i, j = np.triu_indices(len(gold), k=1)
    s = sims[i, j]
    g = np.array([x if x is not None else "" for x in gold], dtype=object)
    gi, gj = g[i], g[j]
    same = (gi == gj) & (gi != "")
    both_oos = (gi == "") & (gj == "")
    out = []
    for c in cosines:
        at = s >= c
        n_same, n_oos = int((at & same).sum()), int((at & both_oos).sum())
        n = int(at.sum())
        wrong = n - n_same - n_oos
        out.append({"cosine": c, "pairs": n, "same_faq": n_same, "wrong": wrong, "both_out_of_scope": n_oos,
                    "precision": round(n_same / (n_same + wrong), 4) if n_same + wrong else None})
    return out


def cluster_counts(queries: list[str], gold: list[str | None], embed: Any, cosines: tuple[float, ...]) -> list[dict]:
    from kb.mining import LoggedQuery, cluster_unanswered

    label = dict(zip(queries, gold))
    log = [LoggedQuery(q, None, 0.0) for q in queries]
    out = []
    for c in cosines:
        clusters = cluster_unanswered(log, embed=embed, cosine=c)
        mixed = sum(len({label.get(q) for q in cl.queries}) > 1 for cl in clusters)
        out.append({"cosine": c, "clusters": len(clusters), "queries_in_clusters": sum(cl.size for cl in clusters),
                    "mixed": mixed, "examples": [list(cl.queries)[:3] for cl in clusters[:3]]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encoders", default="minilm,mpnet")
    ap.add_argument("--out", default="bench/results/cluster_cosine")
    args = ap.parse_args(argv)
    import numpy as np
    import torch

    from app.curation.review import CLUSTER_COSINE
    from app.settings import Settings
    from evaluation.machine import cpu_info
    from models.encoders.load import load_encoder

    torch.set_num_threads(2)
    settings = Settings()
    result: dict[str, Any] = {"machine": cpu_info(), "served_cosine": CLUSTER_COSINE, "encoders": {}}
    for spec in args.encoders.split(","):
        t0 = time.perf_counter()
        encoder = load_encoder(spec, runtime="torch", device="cpu", cache_dir=settings.mpnet_cache)
        per_set = {}
        for name in SETS:
            rows = load(name)
            queries, gold = [q for q, _ in rows], [g for _, g in rows]
            vectors = np.asarray(encoder.encode(queries), dtype=np.float32)
            per_set[name] = {"queries": len(queries), "out_of_scope": sum(g is None for g in gold),
                             "pairs": pair_counts(vectors, gold, COSINES),
                             "clusters": cluster_counts(queries, gold, encoder.encode, COSINES)}
        totals = []
        for k, c in enumerate(COSINES):
            rows = [per_set[s]["pairs"][k] for s in SETS]
            same, wrong = sum(r["same_faq"] for r in rows), sum(r["wrong"] for r in rows)
            cl = [per_set[s]["clusters"][k] for s in SETS]
            totals.append({"cosine": c, "pairs": sum(r["pairs"] for r in rows), "same_faq": same, "wrong": wrong,
                           "both_out_of_scope": sum(r["both_out_of_scope"] for r in rows),
                           "precision": round(same / (same + wrong), 4) if same + wrong else None,
                           "clusters": sum(x["clusters"] for x in cl), "mixed_clusters": sum(x["mixed"] for x in cl),
                           "queries_in_clusters": sum(x["queries_in_clusters"] for x in cl)})
        result["encoders"][spec] = {"sets": per_set, "totals": totals, "seconds": round(time.perf_counter() - t0, 1)}
        print(f"{spec}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    n = sum(len(load(s)) for s in SETS)
    lines = ["# Merging unanswered queries: encoder cosine on realistic FAQ sets", "",
             f"`faq eval cluster-cosine --encoders {args.encoders}`; {n} distinct queries of "
             f"{', '.join(SETS)} (dev + test, users' words). Served threshold: {CLUSTER_COSINE}. "
             f"CPU: {result['machine'].get('cpu_model')}.", ""]
    for spec, r in result["encoders"].items():
        lines += [f"## {spec}", "", "| cosine >= | pairs | same FAQ | wrong (other FAQ or FAQ/OOS) | both OOS "
                  "| merge precision | clusters if none answered | of them mixed | queries in them |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for t in r["totals"]:
            prec = "-" if t["precision"] is None else f"{t['precision']:.3f}"
            lines.append(f"| {t['cosine']} | {t['pairs']} | {t['same_faq']} | {t['wrong']} | {t['both_out_of_scope']} "
                         f"| {prec} | {t['clusters']} | {t['mixed_clusters']} | {t['queries_in_clusters']} |")
        lines.append("")
    out.with_suffix(".md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
