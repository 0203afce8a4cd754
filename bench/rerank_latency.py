"""What the re-ranker adds to a `/match` call, and what each speed-up costs in quality.

For one trained re-ranker folder, every runtime variant scores the same requests: one query against
20 candidate questions (the service's rerank_k) in ONE forward pass, as `Pipeline.rerank` does. Variants
run interleaved (round-robin, request by request), so machine load that comes and goes hits all of
them alike:

    torch fp32, padded to max_len       the naive baseline (every pair padded to 64 wordpieces)
    torch fp32, dynamic padding         padded to the longest pair of the request
    ONNX Runtime fp32                   model.onnx
    ONNX Runtime int8                   model.int8.onnx (dynamic int8 quantisation, per-channel weight scales)
    ONNX Runtime int8, per-tensor       the same with one scale per weight matrix (the earlier export)
    + untrained 6/3-layer exports       latency only, to show what fewer layers buy (`--layers-latency`)

Quality per variant (same folder, so only the runtime differs): STS-B test Pearson/Spearman, stress
suite test accuracy (threshold on its dev part), QQP test accuracy on the first `--qqp-limit` pairs
(threshold tuned on the QQP rows of the folder's heldout_pairs.tsv).

    python bench/rerank_latency.py --reranker runs/reranker --stsb ../shared/data/stsb \
        --qqp-test runs/data/qqp/pairs_test.tsv --kb runs/data/clinc150/kb.jsonl --queries runs/data/clinc150/test.jsonl

Latency alone on a new host, without the hour of training (timing does not depend on the weights):

    python bench/rerank_latency.py --untrained-layers 4 --onnx-only --threads 2 --out bench/results/rerank_latency_HOST

Writes bench/results/rerank_latency.json and .md and prints the table, with the CPU model and whether it
has int8 dot-product instructions (VNNI), which decide how much int8 buys. Threads: `--threads` (default 2,
the service's FAQ_TORCH_THREADS) for both PyTorch and ONNX Runtime.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evaluation.machine import cpu_info  # noqa: E402  (needs REPO on the path)

RESULTS = REPO / "bench" / "results"


class FixedPadding:
    """A Reranker whose tokenisation pads every pair to max_len (what a naive export does)."""

    def __init__(self, reranker):
        self.inner = reranker
        self.runtime = reranker.runtime

    def _logits(self, queries, candidates) -> np.ndarray:
        """(pairs, heads): column 0 the match logit, the last one the STS logit."""
        enc = self.inner.tokenizer(list(queries), list(candidates), truncation="longest_first",
                                   max_length=self.inner.config.max_len, padding="max_length", return_tensors="np")
        batch = {k: np.ascontiguousarray(enc[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
        return self.runtime.logits(batch)

    def _pair_logits(self, pairs, head: int, batch_size=64) -> np.ndarray:
        out = np.zeros(len(pairs), dtype=np.float32)
        for s in range(0, len(pairs), batch_size):
            chunk = pairs[s:s + batch_size]
            out[s:s + batch_size] = self._logits([p[0] for p in chunk], [p[1] for p in chunk])[:, head]
        return out

    def score(self, query, candidates):
        return self.inner.calibrate(self._logits([query] * len(candidates), candidates)[:, 0])

    def score_pairs(self, pairs, batch_size=64):
        return self.inner.calibrate(self._pair_logits(pairs, 0, batch_size))

    def similarity(self, pairs, batch_size=64):
        return 1 / (1 + np.exp(-self._pair_logits(pairs, -1, batch_size).astype(np.float64)))


def requests_from(kb: Path | None, queries: Path | None, n: int, k: int, seed: int) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    if kb and queries:
        from kb.files import read_kb, read_queries

        questions = [r.question for r in read_kb(kb)]
        qs = [q.query for q in read_queries(queries)]
    else:  # the packaged demo FAQ
        from kb.files import read_kb

        questions = [r.question for r in read_kb(REPO / "app" / "demo" / "faq.jsonl")]
        qs = questions
    return [(rng.choice(qs), rng.sample(questions, k)) for _ in range(n)]


def untrained_export(n_layers: int, workdir: Path) -> Path:
    """A `n_layers` cross-encoder from MiniLM's first layers, saved and exported (latency only)."""
    from models.matchers.cross_encoder import RerankerConfig, build_module, export_onnx, load_tokenizer, save_reranker

    path = workdir / f"untrained-L{n_layers}"
    cfg = RerankerConfig(n_layers=n_layers)
    save_reranker(build_module(cfg, init_from_base=True), cfg, load_tokenizer(), path)
    export_onnx(path, quantize=True)
    return path


def per_tensor_copy(folder: Path, out: Path) -> Path:
    """The folder with model.int8.onnx re-quantised with one scale per weight matrix (what
    `export_onnx` did before per-channel scales), to show what the per-channel scales buy."""
    import shutil

    from onnxruntime.quantization import QuantType, quantize_dynamic

    shutil.copytree(folder, out, ignore=shutil.ignore_patterns("checkpoint*", "*.tsv", "phase_a", "model.int8.onnx"))
    quantize_dynamic(str(folder / "model.onnx"), str(out / "model.int8.onnx"), weight_type=QuantType.QInt8, per_channel=False)
    return out


def quality(model, stsb_pairs, stress_pairs, qqp_tune, qqp_test) -> dict:
    from evaluation.stress import evaluate_scorer
    from models.scoring import best_threshold
    from training.cross_encoder import pearson_spearman

    out = {}
    if stsb_pairs:
        sim = model.similarity([(p.q1, p.q2) for p in stsb_pairs])
        out["stsb_pearson"], out["stsb_spearman"] = pearson_spearman(np.asarray(sim), np.array([p.label for p in stsb_pairs]))
    scores = model.score_pairs([(p.q1, p.q2) for p in stress_pairs])
    out["stress_accuracy"] = evaluate_scorer(stress_pairs, scores)["test_accuracy"]
    if qqp_test:
        t, _ = best_threshold(model.score_pairs([(a, b) for a, b, _ in qqp_tune]), np.array([y for _, _, y in qqp_tune]))
        s = model.score_pairs([(p.q1, p.q2) for p in qqp_test])
        out["qqp_accuracy"] = float(np.mean((s >= t).astype(int) == np.array([p.label for p in qqp_test])))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--reranker", help="trained re-ranker folder (with model.onnx / model.int8.onnx)")
    src.add_argument("--untrained-layers", type=int, metavar="N",
                     help="time an untrained N-layer export instead (latency only: timing does not depend on the "
                          "weights, so a host can be measured without the hour of training)")
    ap.add_argument("--stsb", help="STS-B folder (sts-test.csv) for quality")
    ap.add_argument("--qqp-test", help="QQP test pairs for quality")
    ap.add_argument("--qqp-limit", type=int, default=2000, help="QQP test pairs used per variant (default 2000)")
    ap.add_argument("--kb", help="KB whose questions are the candidates (default: the demo FAQ)")
    ap.add_argument("--queries", help="queries JSONL (default: the demo FAQ's questions)")
    ap.add_argument("--candidates", type=int, default=20, help="candidates per request (default 20 = rerank_k)")
    ap.add_argument("--requests", type=int, default=300, help="timed requests per variant (default 300)")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    ap.add_argument("--layers-latency", default="3,6", help="untrained N-layer exports timed too (comma list, '' = none)")
    ap.add_argument("--no-quality", action="store_true", help="latency only")
    ap.add_argument("--onnx-only", action="store_true",
                    help="leave out the PyTorch variants (their OpenMP threads keep spinning after each call and "
                         "slow the ONNX Runtime variant timed next when threads > 1)")
    ap.add_argument("--out", default=str(RESULTS / "rerank_latency"), help="output path without extension")
    args = ap.parse_args()

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    from evaluation.stress import load_stress
    from training.pairs import read_pair_file
    from models.matchers.cross_encoder import load_reranker
    from training.cross_encoder import HELDOUT_FILE, read_stsb, read_written_pairs

    tmp = Path(tempfile.mkdtemp(prefix="rerank-bench-"))
    if args.untrained_layers:
        folder = untrained_export(args.untrained_layers, tmp)
        args.no_quality = True
    else:
        folder = Path(args.reranker)
    variants: dict[str, object] = {}
    base_torch = load_reranker(folder, runtime="torch")
    n_layers = base_torch.config.n_layers
    if not args.onnx_only:
        variants[f"L{n_layers} torch fp32, padded to {base_torch.config.max_len}"] = FixedPadding(base_torch)
        variants[f"L{n_layers} torch fp32, dynamic padding"] = base_torch
    variants[f"L{n_layers} ONNX Runtime fp32"] = load_reranker(folder, runtime="onnx", threads=args.threads)
    variants[f"L{n_layers} ONNX Runtime int8"] = load_reranker(folder, runtime="onnx-int8", threads=args.threads)
    variants[f"L{n_layers} ONNX Runtime int8, per-tensor weight scales"] = load_reranker(
        per_tensor_copy(folder, tmp / "per-tensor"), runtime="onnx-int8", threads=args.threads)
    trained = set(variants)
    for n in [int(x) for x in args.layers_latency.split(",") if x.strip()]:
        if n == n_layers:
            continue
        path = untrained_export(n, tmp)
        variants[f"L{n} ONNX Runtime fp32 (untrained, latency only)"] = load_reranker(path, runtime="onnx", threads=args.threads)
        variants[f"L{n} ONNX Runtime int8 (untrained, latency only)"] = load_reranker(path, runtime="onnx-int8", threads=args.threads)

    reqs = requests_from(Path(args.kb) if args.kb else None, Path(args.queries) if args.queries else None,
                         args.requests + 20, args.candidates, seed=0)
    tok = base_torch.tokenizer
    lengths = [int(tok([q] * len(c), c, truncation=True, max_length=base_torch.config.max_len, padding="longest",
                       return_tensors="np")["input_ids"].shape[1]) for q, c in reqs[:100]]
    timings: dict[str, list[float]] = {name: [] for name in variants}
    print(f"timing {len(variants)} variants x {args.requests} requests of {args.candidates} pairs "
          f"({args.threads} threads) ...", file=sys.stderr)
    for i, (q, cands) in enumerate(reqs):
        for name, model in variants.items():
            t = time.perf_counter()
            model.score(q, cands)
            if i >= 20:  # the first requests warm caches and thread pools
                timings[name].append((time.perf_counter() - t) * 1000.0)

    rows = []
    stsb = read_stsb(Path(args.stsb) / "sts-test.csv") if args.stsb and not args.no_quality else []
    stress = load_stress()
    qqp_test = read_pair_file(args.qqp_test)[: args.qqp_limit] if args.qqp_test and not args.no_quality else []
    qqp_tune = [(p.q1, p.q2, int(p.label)) for p in read_written_pairs(folder / HELDOUT_FILE) if p.source == "qqp"] \
        if qqp_test else []
    for name, model in variants.items():
        ms = np.array(timings[name])
        row = {"variant": name, "p50_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)),
               "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean()), "n": int(len(ms))}
        if name in trained and not args.no_quality:
            print(f"quality of {name} ...", file=sys.stderr)
            row.update(quality(model, stsb, stress, qqp_tune, qqp_test))
        rows.append(row)

    report = {
        "reranker": str(folder), "n_layers": n_layers, "candidates": args.candidates, "requests": args.requests,
        "threads": args.threads, "pair_length_wordpieces": {"median": float(np.median(lengths)), "max": int(max(lengths))},
        "kb": args.kb, "queries": args.queries, "qqp_limit": args.qqp_limit if qqp_test else None,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), **cpu_info(),
                    "load_avg_at_end": os.getloadavg()},
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    head = "| variant | p50 ms | p99 ms | STS-B test r / rho | stress acc | QQP acc |\n|---|---|---|---|---|---|\n"

    def fmt(row, key, f="{:.3f}"):
        return f.format(row[key]) if key in row else "-"

    body = "".join(
        f"| {r['variant']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
        + (f"{r['stsb_pearson']:.3f} / {r['stsb_spearman']:.3f}" if "stsb_pearson" in r else "-")
        + f" | {fmt(r, 'stress_accuracy')} | {fmt(r, 'qqp_accuracy')} |\n" for r in rows)
    md = (f"# Re-ranker latency: 1 query x {args.candidates} candidates, one forward pass, {args.threads} threads\n\n"
          f"Pairs of {report['pair_length_wordpieces']['median']:.0f} wordpieces (median of the request's longest pair), "
          f"{args.requests} timed requests per variant, interleaved. Load average at the end: "
          f"{report['machine']['load_avg_at_end'][0]:.1f} on {os.cpu_count()} CPUs. CPU: "
          f"{report['machine']['cpu_model']}, int8 dot-product instructions: "
          f"{', '.join(report['machine']['int8_dot_product']) or 'none'}."
          + (" Weights: untrained (latency only)." if args.untrained_layers else "") + "\n\n" + head + body)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
