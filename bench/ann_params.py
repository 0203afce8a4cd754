"""Choose Annoy's n_trees / search_k by measurement.

Indexes up to N real questions (Quora question pairs TSV: `label q1 q2 id`, both question columns,
de-duplicated), encoded with MiniLM, and measures for a grid of n_trees x search_k:
recall@10 against exact search, p50/p99 single-query latency, build time and index size.
Queries are held-out questions (not in the index), like real user queries.

    python bench/ann_params.py --questions 100000 --data ../shared/data/qqp_bimpm ../shared/data/wikiqa runs/data/*
        (runs/data/* from `faq data prepare`: CLINC150, BANKING77, MRPC, STS-B sentences)
    python bench/ann_params.py --random --questions 20000     # random unit vectors: debug the harness

Vectors are cached as .npy (default /tmp/faq_bench/) so re-runs skip the encoding. Writes
bench/results/ann_params.json and .md and prints the table; the chosen defaults are the
lowest-p50 configuration reaching recall@10 >= --target (p50s within 5% count as ties; then
the smaller index wins).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from index.ann import AnnIndex, exact_search, recall_at_k  # noqa: E402

RESULTS = REPO / "bench" / "results"


def _texts_of(path: Path):
    """Sentences of one file: pair TSVs (`label q1 q2 ...`, as QQP or `faq data prepare` writes them),
    WikiQA-style TSVs (`question sentence label`), or exchange-format JSONL (question / query)."""
    with open(path, encoding="utf-8-sig") as fh:
        for line_no, line in enumerate(fh, 1):
            if path.suffix == ".jsonl":
                row = json.loads(line)
                yield row.get("question") or row.get("query") or ""
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 3:
                raise SystemExit(f"{path}:{line_no}: expected at least 3 tab-separated columns, got {len(cols)}")
            yield from ((cols[1], cols[2]) if path.suffix == ".tsv" else (cols[0], cols[1]))


def read_questions(paths: list[Path]) -> list[str]:
    """All distinct sentences of the given files; a folder contributes its .tsv, .txt and .jsonl files."""
    files: list[Path] = []
    for data in paths:
        found = [data] if data.is_file() else sorted(
            f for f in data.iterdir() if f.suffix in (".tsv", ".txt", ".jsonl") and f.is_file() and f.stem != "readme")
        if not found:
            raise SystemExit(f"--data {data}: expected a TSV/JSONL file or a folder holding some")
        files += found
    seen: dict[str, None] = {}
    for path in files:
        for text in _texts_of(path):
            text = " ".join(text.split())
            if text:
                seen.setdefault(text, None)
    return list(seen)


def load_vectors(args: argparse.Namespace) -> tuple[np.ndarray, str]:
    """(n, dim) unit vectors for index + queries, and a description of where they came from."""
    total = args.questions + args.queries
    if args.random:
        rng = np.random.default_rng(args.seed)
        vecs = rng.standard_normal((total, args.dim)).astype(np.float32)
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True), f"random unit vectors, dim {args.dim}"
    questions = read_questions([Path(d) for d in args.data])
    rng = np.random.default_rng(args.seed)
    questions = [questions[i] for i in rng.permutation(len(questions))[:total]]
    if args.max_words:  # question-length cap: long answer sentences (WikiQA) would dominate encoding time
        questions = [" ".join(q.split()[: args.max_words]) for q in questions]
    key = hashlib.sha1(("\n".join(questions) + args.encoder).encode()).hexdigest()[:12]
    cache = Path(args.cache_dir) / f"{args.encoder}-{len(questions)}-{key}.npy"
    source = f"{len(questions)} distinct questions from {args.data}, encoder {args.encoder}"
    if cache.is_file():
        print(f"vectors from cache {cache}")
        return np.load(cache), source
    from models.encoders.load import load_encoder

    encoder = load_encoder(args.encoder)
    print(f"encoding {len(questions)} questions with {encoder.id} on {getattr(encoder, 'device', '?')} ...")
    t = time.perf_counter()
    vecs = encoder.encode(questions, batch_size=args.batch_size, show_progress_bar=True)
    elapsed = time.perf_counter() - t
    print(f"encoded in {elapsed:.1f}s ({len(questions) / elapsed:.0f} sentences/s)")
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vecs.astype(np.float32))
    return vecs.astype(np.float32), source + f" (encoded at {len(questions) / elapsed:.0f} sentences/s)"


def measure(index: AnnIndex, queries: np.ndarray, base: np.ndarray, exact: tuple[np.ndarray, np.ndarray],
            k: int, search_k: int) -> dict:
    for q in queries[:50]:  # warm the page cache and branch predictors
        index.search_one(q, k, search_k)
    latencies = np.empty(len(queries))
    ids = np.full((len(queries), k), -1, dtype=np.int64)
    for row, q in enumerate(queries):
        t = time.perf_counter_ns()
        items, _ = index.search_one(q, k, search_k)
        latencies[row] = (time.perf_counter_ns() - t) / 1e6
        ids[row, : len(items)] = items
    safe = np.where(ids >= 0, ids, 0)
    item_cos = np.einsum("qd,qkd->qk", queries, base[safe])
    item_cos[ids < 0] = -np.inf
    return {
        "recall_at_10": round(recall_at_k(ids, exact[0], exact[1], item_cos), 5),
        "p50_ms": round(float(np.percentile(latencies, 50)), 4),
        "p99_ms": round(float(np.percentile(latencies, 99)), 4),
        "mean_ms": round(float(latencies.mean()), 4),
    }


def measure_exact(queries: np.ndarray, base: np.ndarray, k: int) -> dict:
    """Baseline: brute-force numpy search for one query at a time (what Annoy has to beat)."""
    for q in queries[:50]:
        exact_search(q[None, :], base, k)
    latencies = np.empty(len(queries))
    for row, q in enumerate(queries):
        t = time.perf_counter_ns()
        exact_search(q[None, :], base, k)
        latencies[row] = (time.perf_counter_ns() - t) / 1e6
    return {"recall_at_10": 1.0, "p50_ms": round(float(np.percentile(latencies, 50)), 4),
            "p99_ms": round(float(np.percentile(latencies, 99)), 4), "mean_ms": round(float(latencies.mean()), 4),
            "memory_bytes": int(base.nbytes)}


def choose(results: list[dict], target: float, latency_slack: float = 0.05) -> dict | None:
    """The configuration reaching `target` recall@10 at the lowest p50 latency. p50s within
    `latency_slack` (5%) of the best are measurement noise on a shared machine, so among those the
    smallest index (fewer trees: faster build, less memory) wins."""
    ok = [r for r in results if r["recall_at_10"] >= target]
    if not ok:
        return None
    best = min(r["p50_ms"] for r in ok)
    near = [r for r in ok if r["p50_ms"] <= best * (1 + latency_slack)]
    return min(near, key=lambda r: (r["index_bytes"], r["p50_ms"]))


def to_markdown(report: dict) -> str:
    lines = [
        "# Annoy parameters: recall@10 vs latency",
        "",
        f"- data: {report['source']}",
        f"- index: {report['n_index']} vectors, dim {report['dim']}; queries: {report['n_queries']} held-out",
        f"- machine: {report['machine']}; single-threaded queries, build n_jobs={report['build_jobs']}",
        f"- chosen (recall@10 >= {report['target']} at the lowest p50, ties within 5% -> smaller index): "
        + (f"**n_trees={report['chosen']['n_trees']}, search_k={report['chosen']['search_k_label']}**"
           if report["chosen"] else "none reached the target"),
        f"- baseline, exact numpy search (fp32 matrix in RAM, {report['exact']['memory_bytes'] / 1e6:.1f} MB): "
        f"p50 {report['exact']['p50_ms']:.3f} ms, p99 {report['exact']['p99_ms']:.3f} ms",
        "",
        "| n_trees | search_k | recall@10 | p50 ms | p99 ms | build s | index MB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['n_trees']} | {r['search_k_label']} | {r['recall_at_10']:.4f} | {r['p50_ms']:.3f} | "
            f"{r['p99_ms']:.3f} | {r['build_s']:.1f} | {r['index_bytes'] / 1e6:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["../shared/data/qqp_bimpm"],
                   help="files or folders of sentences: pair TSVs (label q1 q2), WikiQA TSVs, KB/query JSONL")
    p.add_argument("--questions", type=int, default=100_000, help="index size (at most; limited by the data)")
    p.add_argument("--queries", type=int, default=1000, help="held-out query questions")
    p.add_argument("--max-words", type=int, default=0, help="truncate each sentence to this many words (0: keep)")
    p.add_argument("--random", action="store_true", help="random unit vectors instead of encoded questions")
    p.add_argument("--dim", type=int, default=384, help="dimension of --random vectors")
    p.add_argument("--encoder", default="minilm")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "faq_bench"))
    p.add_argument("--n-trees", default="10,25,50,100")
    p.add_argument("--search-k", default="auto,1000,2000,5000,10000,20000,30000,40000,50000,100000",
                   help="comma list; auto = Annoy's default n_trees * k")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--target", type=float, default=0.99)
    p.add_argument("--build-jobs", type=int, default=-1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "ann_params"), help="output path without extension")
    args = p.parse_args(argv)
    for name in ("questions", "queries", "k"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    n_trees_grid = [int(x) for x in args.n_trees.split(",")]
    search_k_grid = [-1 if x.strip() == "auto" else int(x) for x in args.search_k.split(",")]

    vecs, source = load_vectors(args)
    if len(vecs) <= args.queries:
        raise SystemExit(f"only {len(vecs)} vectors: need more than --queries {args.queries}")
    queries, base = vecs[: args.queries], vecs[args.queries : args.queries + args.questions]
    print(f"index {len(base)} x {base.shape[1]}, {len(queries)} held-out queries")
    exact = exact_search(queries, base, args.k)
    exact_latency = measure_exact(queries, base, args.k)
    print(f"exact numpy baseline: p50={exact_latency['p50_ms']:.3f}ms p99={exact_latency['p99_ms']:.3f}ms")

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n_trees in n_trees_grid:
            t = time.perf_counter()
            built = AnnIndex.build(base, n_trees, n_jobs=args.build_jobs)
            build_s = time.perf_counter() - t
            path = Path(tmp) / f"bench-{n_trees}.ann"
            built.save(path)
            built.unload()
            index = AnnIndex.load(path, base.shape[1], mmap=True)
            for search_k in search_k_grid:
                row = {
                    "n_trees": n_trees, "search_k": search_k,
                    "search_k_label": f"auto ({n_trees * args.k})" if search_k == -1 else str(search_k),
                    "build_s": round(build_s, 2), "index_bytes": path.stat().st_size,
                    **measure(index, queries, base, exact, args.k, search_k),
                }
                results.append(row)
                print(f"n_trees={n_trees:>4} search_k={row['search_k_label']:>12}  recall@10={row['recall_at_10']:.4f}  "
                      f"p50={row['p50_ms']:.3f}ms p99={row['p99_ms']:.3f}ms  build={build_s:.1f}s "
                      f"size={row['index_bytes'] / 1e6:.1f}MB", flush=True)
            index.unload()
            path.unlink()

    chosen = choose(results, args.target)
    report = {
        "source": source, "n_index": len(base), "n_queries": len(queries), "dim": int(base.shape[1]), "k": args.k,
        "target": args.target, "build_jobs": args.build_jobs,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}",
        "exact": exact_latency, "results": results, "chosen": chosen,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = to_markdown(report)
    out.with_suffix(".md").write_text(markdown)
    print()
    print(markdown)
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0 if chosen else 1


if __name__ == "__main__":
    sys.exit(main())
