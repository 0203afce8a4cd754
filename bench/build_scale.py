"""Index build time and serving memory at 100k+ questions.

    python bench/build_scale.py --texts runs/scale/pool.txt --sizes 100000,300000 --encoder minilm

Each size gets a KB of N questions, 3 per FAQ (placeholder answers: the timing is the encoder's and
Annoy's, not the answer segment's), drawn from `--texts` (one sentence per line). When the pool holds
fewer distinct sentences than N, sentences are reused with a numbered suffix ("... (2)"): such a KB
is for timing only, never for quality. For each size: `faq kb import` + `faq index build` in a fresh
data dir (phase timings from the manifest), then `faq serve` on it, 200 `/match` queries, and the
server's resident memory (the process tree's VmRSS). A 1,000,000-question build is extrapolated
from the two largest sizes, linearly per phase (Annoy's build grows a little faster than linear,
so that line is a lower bound). Writes bench/results/build_scale.{json,md}.

`--make-pool DIR` first writes `--texts` from the public datasets' train splits under DIR (the query
encoder's corpus, training/query_encoder/corpus.py: 4-300 characters, distinct, shuffled with seed 0).
`--query-encoder DIR` measures balanced mode: the build and the service get FAQ_QUERY_ENCODER.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.compare import configured_model_cache  # noqa: E402
from bench.serving import Server, free_port, rss_mb  # noqa: E402
from evaluation.machine import cpu_info  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "build_scale.json"
PER_FAQ = 3


def synthetic_kb(pool: list[str], n: int, path: Path) -> int:
    """Write N questions (PER_FAQ per FAQ) as KB JSONL; returns how many are reused sentences."""
    reused = 0
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            text = pool[i % len(pool)]
            if i >= len(pool):
                text, reused = f"{text} ({i // len(pool) + 1})", reused + 1
            faq = i // PER_FAQ
            fh.write(json.dumps({"faq_id": f"f{faq}", "question": text, "answer": f"[intent: f{faq}]"}) + "\n")
    return reused


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", required=True, help="sentence pool, one per line")
    ap.add_argument("--sizes", default="100000,300000")
    ap.add_argument("--make-pool", metavar="DATA_DIR", help="write --texts first, from ../shared/data's train splits")
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--runtime", default="auto")
    ap.add_argument("--query-encoder", help="balanced mode: a `faq train query-encoder` folder fitted to --encoder "
                    "(FAQ_QUERY_ENCODER for the build and the service)")
    ap.add_argument("--n-trees", type=int, help="FAQ_ANN_N_TREES (default: the service's)")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs (printed)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)

    if args.make_pool:
        import random

        from training.query_encoder.corpus import corpus_sentences

        texts = [t for t in corpus_sentences(args.make_pool)[0] if 4 <= len(t) <= 300]
        random.Random(0).shuffle(texts)
        Path(args.texts).parent.mkdir(parents=True, exist_ok=True)
        Path(args.texts).write_text("\n".join(texts) + "\n", encoding="utf-8")
        print(f"{args.texts}: {len(texts)} sentences", flush=True)
    pool = list(dict.fromkeys(line.strip() for line in open(args.texts, encoding="utf-8") if line.strip()))
    queries = pool[1::997][:200]
    sizes = [int(s) for s in args.sizes.split(",")]
    faq = [sys.executable, "-m", "cli.main"]
    rows = []
    root = Path(tempfile.mkdtemp(prefix="faq-scale-"))
    for n in sizes:
        data = root / f"n{n}"
        data.mkdir()
        reused = synthetic_kb(pool, n, data / "kb.jsonl")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAQ_")},
               "FAQ_DATA_DIR": str(data), "FAQ_ENCODER": args.encoder, "FAQ_ENCODER_RUNTIME": args.runtime,
               "FAQ_MODEL_CACHE": str(configured_model_cache()),
               "FAQ_QUERY_CACHE_SIZE": "0", "FAQ_QUERY_LOG": "false"}
        if args.n_trees:
            env["FAQ_ANN_N_TREES"] = str(args.n_trees)
        if args.query_encoder:
            env["FAQ_QUERY_ENCODER"] = str(Path(args.query_encoder).resolve())
        t0 = time.perf_counter()
        for step in (["kb", "import", str(data / "kb.jsonl")], ["index", "build", "--no-progress", "--no-lexical"]):
            done = subprocess.run(faq + step, cwd=REPO, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{' '.join(step)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            print(done.stdout.strip().splitlines()[-1], flush=True)
        wall = time.perf_counter() - t0
        manifest = json.loads((data / "indexes" / "current" / "manifest.json").read_text())
        port = free_port()
        server = Server(faq + ["serve", "--port", str(port), "--log-level", "warning"], env, data / "serve.log")
        try:
            import httpx

            url = f"http://127.0.0.1:{port}"
            ready_s = server.wait_ready(url, 600)
            with httpx.Client(timeout=30) as client:
                for q in queries:
                    client.post(f"{url}/match", json={"query": q}).raise_for_status()
            rss = rss_mb(server.proc.pid)
        finally:
            server.stop()
        rows.append({"questions": n, "reused_sentences": reused, "import_and_build_wall_s": round(wall, 1),
                     "timings": manifest.get("timings"), "serve_ready_s": round(ready_s, 1),
                     "serve_rss_mb": None if rss is None else round(rss, 1),
                     "index_mb": round(sum(f.stat().st_size for f in (data / "indexes" / "current").resolve().iterdir()) / 1e6, 1)})
        print(json.dumps(rows[-1]), flush=True)
    extrapolated = None
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        per = {}
        for key in ("encode_s", "annoy_build_s", "verify_s", "total_s"):
            ta, tb = (a["timings"] or {}).get(key), (b["timings"] or {}).get(key)
            if ta is not None and tb is not None:
                slope = (tb - ta) / (b["questions"] - a["questions"])
                per[key] = round(tb + slope * (1_000_000 - b["questions"]), 1)
        extrapolated = {"questions": 1_000_000, "from": [a["questions"], b["questions"]], "timings_s": per}
    result = {"created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), **cpu_info()},
              "command": " ".join(sys.argv), "encoder": args.encoder, "runtime": args.runtime,
              "query_encoder": args.query_encoder,
              "rows": rows, "extrapolated_1m": extrapolated}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    mode = args.encoder + (f" + query encoder {args.query_encoder}" if args.query_encoder else "")
    md = [f"# Build scale ({result['created_at']}, {result['machine']['cpu_model']}, {mode} on {args.runtime})",
          "", f"`{result['command']}`", "",
          "| questions | encode s | sentences/s | Annoy build s | verify s | build total s | index MB | serving RSS MB |",
          "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["timings"] or {}
        md.append(f"| {r['questions']:,} | {t.get('encode_s', 0):.1f} | {t.get('encode_sentences_per_s', 0):.0f} | "
                  f"{t.get('annoy_build_s', 0):.1f} | {t.get('verify_s', 0):.1f} | {t.get('total_s', 0):.1f} | "
                  f"{r['index_mb']} | {r['serve_rss_mb']} |")
    if extrapolated:
        md += ["", f"1,000,000 questions, extrapolated linearly from {extrapolated['from']}: "
               + ", ".join(f"{k} {v}" for k, v in extrapolated["timings_s"].items())]
    out.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))
    if args.keep:
        print(f"data dirs kept under {root}")
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
