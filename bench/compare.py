"""faq-match against the recipe users copy (bench/peer.py: all-MiniLM-L6-v2 + FAISS flat IP behind
FastAPI), on the same KB, the same queries and the same load generator, in one invocation.

    python bench/compare.py --kb runs/data/clinc150/kb.jsonl --queries runs/data/clinc150/test.jsonl \
        --requests 2000 --concurrency 1,32 --faq-encoder minilm,mpnet [--runtime torch,onnx-int8] \
        [--query-encoder DIR] [--no-floor] [--no-peer]

For each faq-match configuration (every `--faq-encoder` x `--runtime` pair, and with `--query-encoder DIR`
balanced mode per `--runtime`: built with mpnet, served and built with FAQ_QUERY_ENCODER=DIR), in a fresh
temporary data dir: `faq kb import KB` then `faq index build` (timed; the encode rate comes from the build
manifest), `faq serve` on a free loopback port, wait for /readyz, then `bench/load.py` once per
`--concurrency` while the server's resident memory is sampled (peak per run), then stop it. Then the
same for the HTTP floor (`bench/floor.py serve`: a constant FastAPI /match under `faq serve`'s uvicorn
settings; skip it with `--no-floor`) and the peer (`bench/peer.py serve`; its build is the encode +
FAISS add at start-up). One server runs at a time.

Writes `<out-dir>/compare.md` and `compare.json` (per system and concurrency: latency p50/p99,
throughput, errors, top-1 accuracy, answered rate, RSS peak, build encode rate; faq-match/peer ratios;
the systems that ran, the CPU and the exact command line) and each load run's own report under
`<out-dir>/compare_runs/`. Both also say where faq-match's time goes (`breakdown` in the JSON, per
faq-match system and concurrency, medians in ms): the client's p50 (and p99), the server's
`timings_ms.total`, what lies outside the pipeline (client p50 - total), of which the HTTP floor (the
floor's client p50 at the same concurrency) and faq-match's own layers (the rest: route, validation,
response building, metrics, query log, the hand-offs to the encoder thread and back), and inside `total`
the queue wait (per response: total - the four stages), encode, search, rerank and decide.

The servers get a clean environment: inherited FAQ_* variables are dropped (a FAQ_DATABASE_URL or
FAQ_ES_URL from the shell must not send a benchmark's import into a real store, and a run must be
reproducible from its recorded command line); pass settings explicitly with `--faq-env KEY=VALUE`.
`--threads N` gives both systems N torch threads; without it each keeps its own default (faq-match:
FAQ_TORCH_THREADS=2; the peer: torch's choice), and the report records what each used.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.serving import RssSampler, Server, free_port, rss_mb  # noqa: E402  (needs REPO on the path)
from evaluation.machine import cpu_info  # noqa: E402

DEFAULT_OUT_DIR = REPO / "bench" / "results"
PEER = "peer"
FAQ_MATCH = "faq-match"
FLOOR = "floor"
FLOOR_NAME = "floor (constant FastAPI /match)"
#: the pipeline's stages as load.py reports their medians, and the names the breakdown gives them
STAGES = (("encode", "encode"), ("retrieve", "search"), ("rerank", "rerank"), ("decide", "decide"))
# what the report keeps of each load.py JSON (the rest stays in its per-run file)
LOAD_FIELDS = ("concurrency", "requests_sent", "ok", "errors", "errors_by_kind", "stopped_by_time_limit", "wall_s",
               "throughput_rps", "latency_ms", "server_timings_ms_median", "answered_rate", "top1_accuracy",
               "labelled", "index_versions")


# ---------------------------------------------------------------- pure helpers (tested)

def parse_list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def parse_concurrency(text: str) -> list[int]:
    values = [int(p) for p in parse_list(text)]
    if not values or any(not 1 <= v <= 256 for v in values):
        raise argparse.ArgumentTypeError(f"--concurrency: comma-separated integers in 1..256, got {text!r}")
    return values


def parse_build_rate(output: str) -> float | None:
    """Encode sentences/s from `faq index build` output: the fallback when the manifest lacks it."""
    found = re.findall(r"\(([\d.]+) sentences/s", output)
    return float(found[-1]) if found else None


def system_name(encoder: str, runtime: str | None, query_encoder: bool = False) -> str:
    return f"faq-match {encoder}" + ("+query-encoder" if query_encoder else "") + (f"/{runtime}" if runtime else "")


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")


def summarize_run(load: dict, rss_peak_mb: float | None) -> dict:
    """One load.py report reduced to the fields the comparison uses, plus the server's RSS peak."""
    run = {k: load.get(k) for k in LOAD_FIELDS}
    run["rss_peak_mb"] = None if rss_peak_mb is None else round(rss_peak_mb, 1)
    return run


def _ratio(num: float | None, den: float | None, digits: int = 2) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return round(num / den, digits)


def compare_runs(faq: dict, peer: dict) -> dict:
    """faq-match run vs the peer run at the same concurrency. Speedups > 1 mean faq-match is faster
    (peer latency / faq-match latency); ratios > 1 mean faq-match has more of it."""
    flat, plat = faq.get("latency_ms") or {}, peer.get("latency_ms") or {}
    acc_f, acc_p = faq.get("top1_accuracy"), peer.get("top1_accuracy")
    return {
        "concurrency": faq.get("concurrency"),
        "p50_speedup": _ratio(plat.get("p50"), flat.get("p50")),
        "p99_speedup": _ratio(plat.get("p99"), flat.get("p99")),
        "throughput_ratio": _ratio(faq.get("throughput_rps"), peer.get("throughput_rps")),
        "top1_delta": None if acc_f is None or acc_p is None else round(acc_f - acc_p, 4),
        "rss_ratio": _ratio(faq.get("rss_peak_mb"), peer.get("rss_peak_mb")),
    }


def build_comparisons(systems: list[dict]) -> list[dict]:
    """Every faq-match system against the peer, concurrency by concurrency."""
    peer = next((s for s in systems if s["kind"] == PEER), None)
    if peer is None:
        return []
    peer_runs = {r["concurrency"]: r for r in peer["runs"]}
    peer_rate = (peer.get("build") or {}).get("encode_sentences_per_s")
    out = []
    for s in systems:
        if s["kind"] != FAQ_MATCH:
            continue
        rows = [compare_runs(r, peer_runs[r["concurrency"]]) for r in s["runs"] if r["concurrency"] in peer_runs]
        out.append({"system": s["name"], "vs": peer["name"],
                    "build_rate_ratio": _ratio((s.get("build") or {}).get("encode_sentences_per_s"), peer_rate),
                    "runs": rows})
    return out


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def breakdown_row(run: dict, floor_run: dict | None = None) -> dict:
    """Where one faq-match load run's time went, in medians (ms): the client's p50 (and p99) split into
    the server's `timings_ms.total` and what lies outside the pipeline, that split again into the HTTP
    floor (the floor server's client p50 at the same concurrency) and faq-match's own layers; `total`
    split into the queue wait and the four stages. Medians do not add up exactly, and under noise the
    own layers can come out negative: they are kept as measured."""
    lat = run.get("latency_ms") or {}
    srv = run.get("server_timings_ms_median") or {}
    p50, total = lat.get("p50"), srv.get("total")
    floor_p50 = ((floor_run or {}).get("latency_ms") or {}).get("p50")
    outside = _minus(p50, total)
    stages = {name: srv.get(key) for key, name in STAGES}
    queue = srv.get("queue_wait")
    if queue is None and total is not None and all(v is not None for v in stages.values()):
        # a report without the per-response queue wait: the difference of the medians
        queue = round(total - sum(stages.values()), 3)
    return {"concurrency": run.get("concurrency"), "client_p50": p50, "client_p99": lat.get("p99"),
            "server_total": total, "outside_pipeline": outside, "http_floor": floor_p50,
            "own_layers": _minus(outside, floor_p50), "queue_wait": queue, **stages}


def build_breakdown(systems: list[dict]) -> list[dict]:
    """Every faq-match system's runs as `breakdown_row`s, against the floor run of the same concurrency
    (no floor, or none at that concurrency: the floor and own-layer columns stay empty)."""
    floor = next((s for s in systems if s["kind"] == FLOOR and s.get("runs")), None)
    floor_runs = {r["concurrency"]: r for r in floor["runs"] if not r.get("failed")} if floor else {}
    return [{"system": s["name"], "floor": floor["name"] if floor else None,
             "runs": [breakdown_row(r, floor_runs.get(r["concurrency"])) for r in s["runs"] if not r.get("failed")]}
            for s in systems if s["kind"] == FAQ_MATCH and s.get("runs")]


BREAKDOWN_COLUMNS = ("client_p50", "client_p99", "server_total", "outside_pipeline", "http_floor", "own_layers",
                     "queue_wait", "encode", "search", "rerank", "decide")


def render_breakdown(breakdown: list[dict]) -> list[str]:
    """The "where the time goes" table of compare.md (empty without faq-match runs)."""
    if not any(b["runs"] for b in breakdown):
        return []
    floor = next((b["floor"] for b in breakdown if b["floor"]), None)
    lines = ["", "Where the time goes (ms, medians except client p99): outside the pipeline = client p50 − server "
             "`timings_ms.total`; of it, the HTTP floor = the client p50 of the floor server (bench/floor.py, a "
             "constant FastAPI /match" + ("" if floor else "; not run: `--no-floor`") + ") at the same concurrency, and our layers = the rest (route, validation, response building, metrics, "
             "query log, the hand-offs to the encoder thread and back; negative: below the noise). Queue wait = "
             "total − encode − search − rerank − decide, per response (admission to the encoder call). Medians "
             "do not add up exactly.", "",
             "| system | conc. | client p50 | client p99 | server total | outside pipeline | HTTP floor | "
             "our layers | queue wait | encode | search | rerank | decide |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for b in breakdown:
        for r in b["runs"]:
            lines.append(f"| {b['system']} | {r['concurrency']} | "
                         + " | ".join(_fmt(r[c], 2) for c in BREAKDOWN_COLUMNS) + " |")
    return lines


def _fmt(value, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}{suffix}"
    return f"{value}{suffix}"


def runtime_label(system: dict) -> str:
    """The runtime a system reported, else the one asked for, marked as unconfirmed."""
    reported = system.get("runtime_reported")
    if reported:
        return ", ".join(sorted({str(v) for v in reported.values()}))
    asked = system.get("runtime")
    return f"{asked}? (asked; not reported)" if asked else "default (not reported)"


def render_markdown(report: dict) -> str:
    m, kb, q = report["machine"], report["kb"], report["queries"]
    lines = [
        f"# faq-match vs the sentence-transformers + FAISS recipe ({report['created_at']})",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {m.get('cpu_model')}, {m.get('cpus')} CPUs, int8 dot product: "
        f"{', '.join(m.get('int8_dot_product') or []) or 'none'}; load average before {m.get('load_avg_before')}, "
        f"after {m.get('load_avg_after')}.",
        f"KB `{kb['path']}`: {kb['n_faqs']} FAQs, {kb['n_phrasings']} phrasings. Queries `{q['path']}`: "
        f"{q['n']} ({q['n_labelled']} labelled), {report['settings']['requests']} requests per run "
        f"(max {report['settings']['max_seconds']} s), top_k {report['settings']['top_k']}.",
        "",
        "Systems, one server at a time in this order: "
        + (", ".join(f"{s['name']}" + (" (failed)" if s.get("failed") else "") for s in report["systems"]) or "none")
        + ".",
        "",
        "| system | conc. | p50 ms | p99 ms | req/s | errors | top-1 | answered | server encode p50 ms | RSS peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report["systems"]:
        if s.get("failed"):
            lines.append(f"| {s['name']} | – | failed: {s['failed']} | | | | | | | |")
        for r in s["runs"]:
            lat = r.get("latency_ms") or {}
            srv = r.get("server_timings_ms_median") or {}
            errors = r.get("errors")
            if r.get("failed"):
                errors = f"run failed: {r['failed']}"
            lines.append(
                f"| {s['name']} | {r['concurrency']} | {_fmt(lat.get('p50'))} | {_fmt(lat.get('p99'))} | "
                f"{_fmt(r.get('throughput_rps'))} | {_fmt(errors)} | {_fmt(r.get('top1_accuracy'), 3)} | "
                f"{_fmt(r.get('answered_rate'), 3)} | {_fmt(srv.get('encode'))} | {_fmt(r.get('rss_peak_mb'), 0)} |")
    lines += ["", "Build (faq-match: `faq kb import` + `faq index build`; the peer: model load + encode + FAISS add "
              "at start-up):", "",
              "| system | encoder | runtime | encode sentences/s | encode s | build wall s | start to ready s | "
              "torch threads |",
              "|---|---|---|---|---|---|---|---|"]
    for s in report["systems"]:
        if s["kind"] == FLOOR:
            continue
        b = s.get("build") or {}
        lines.append(f"| {s['name']} | {b.get('encoder_id') or '–'} | {runtime_label(s)} | "
                     f"{_fmt(b.get('encode_sentences_per_s'), 0)} | "
                     f"{_fmt(b.get('encode_s'), 2)} | {_fmt(b.get('wall_s'), 1)} | {_fmt(s.get('ready_s'), 1)} | "
                     f"{_fmt(s.get('torch_threads'))} |")
    lines += render_breakdown(report.get("breakdown") or [])
    if report["comparisons"]:
        lines += ["", "faq-match / peer at the same concurrency (speedup = peer latency / faq-match latency; "
                  "> 1: faq-match is faster or has more):", "",
                  "| faq-match | conc. | p50 speedup | p99 speedup | throughput ratio | top-1 delta | RSS ratio | "
                  "build encode rate ratio |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in report["comparisons"]:
            for r in c["runs"]:
                lines.append(f"| {c['system']} | {r['concurrency']} | {_fmt(r['p50_speedup'], 2, 'x')} | "
                             f"{_fmt(r['p99_speedup'], 2, 'x')} | {_fmt(r['throughput_ratio'], 2, 'x')} | "
                             f"{_fmt(r['top1_delta'], 3)} | {_fmt(r['rss_ratio'], 2, 'x')} | "
                             f"{_fmt(c['build_rate_ratio'], 2, 'x')} |")
    lines += ["", "The peer answers every query (raw cosine, no threshold), faq-match only above its calibrated "
              "threshold: compare answered rates with that in mind. The floor answers a constant (no top-1 or "
              "answered rate). Timings on a shared machine are noisy; compare within one run.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- runs (the processes: bench/serving.py)

def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def run_loads(url: str, server: Server, name: str, args: argparse.Namespace, runs_dir: Path) -> list[dict]:
    """bench/load.py once per concurrency against a ready server, with its RSS peak per run."""
    runs = []
    with RssSampler(server.proc.pid) as sampler:
        for c in args.concurrency:
            out = runs_dir / f"{slug(name)}_c{c}.json"
            out.unlink(missing_ok=True)
            argv = [sys.executable, str(REPO / "bench" / "load.py"), "--url", url, "--queries", str(args.queries),
                    "--concurrency", str(c), "--requests", str(args.requests), "--max-seconds", str(args.max_seconds),
                    "--top-k", str(args.top_k), "--out", str(out)]
            sampler.take_peak()
            print(f"  load: concurrency {c}", flush=True)
            done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=args.max_seconds + 120)
            peak = sampler.take_peak()
            print("\n".join("    " + line for line in done.stdout.strip().splitlines()), flush=True)
            # load.py exits 1 when some requests failed but still writes its report; only a missing
            # report means the run itself failed
            if out.exists():
                run = summarize_run(json.loads(out.read_text()), peak)
                run["load_json"] = str(out)
            else:
                reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
                print(f"    load.py failed: {reason}", file=sys.stderr, flush=True)
                run = {"concurrency": c, "failed": reason, "rss_peak_mb": None if peak is None else round(peak, 1)}
            runs.append(run)
    return runs


def server_env(args: argparse.Namespace, extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                "FAQ_MODEL_CACHE": str(args.model_cache),
                # load.py cycles through its query file: with the query cache on, most requests would be
                # hits and the run would measure the cache, not the encoder (bench/cache_replay.py does)
                "FAQ_QUERY_CACHE_SIZE": "0"})
    env.update(args.faq_env)
    env.update(extra)
    return env


def serve_and_load(argv: list[str], env: dict, log: Path, port: int, info_path: str, name: str,
                   args: argparse.Namespace, runs_dir: Path) -> tuple[float, dict, float | None, list[dict]]:
    """Start a server, wait until ready, read `info_path`, run every load, stop it (always):
    (seconds to ready, the info body, RSS when ready, the load runs)."""
    url = f"http://127.0.0.1:{port}"
    server = Server(argv, env, log)
    try:
        ready_s = server.wait_ready(url, args.ready_timeout)
        info = get_json(f"{url}{info_path}")
        rss_ready = rss_mb(server.proc.pid)
        return ready_s, info, rss_ready, run_loads(url, server, name, args, runs_dir)
    finally:
        server.stop()


def run_faq_match(encoder: str, runtime: str | None, args: argparse.Namespace, tmp: Path, runs_dir: Path,
                  query_encoder: Path | None = None) -> dict:
    name = system_name(encoder, runtime, query_encoder is not None)
    data_dir = tmp / slug(name)
    data_dir.mkdir(parents=True)
    extra = {"FAQ_DATA_DIR": str(data_dir), "FAQ_ENCODER": encoder}
    if query_encoder is not None:
        # the build reads it too: it checks the folder was fitted to this encoder and records it
        extra["FAQ_QUERY_ENCODER"] = str(query_encoder)
    if runtime:
        extra["FAQ_ENCODER_RUNTIME"] = runtime
    if args.threads:
        extra["FAQ_TORCH_THREADS"] = str(args.threads)
    env = server_env(args, extra)
    faq = [sys.executable, "-m", "cli.main"]
    print(f"{name}: building in {data_dir}", flush=True)

    t0 = time.perf_counter()
    output = ""
    for argv in (faq + ["kb", "import", str(args.kb)], faq + ["index", "build", "--no-progress"]):
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.build_timeout)
        output += done.stdout + done.stderr
        if done.returncode != 0:
            raise RuntimeError(f"{shlex.join(argv[2:])} failed ({done.returncode}):\n{output[-3000:]}")
    wall_s = time.perf_counter() - t0
    manifest = json.loads((data_dir / "indexes" / "current" / "manifest.json").read_text())
    timings = manifest.get("timings") or {}
    build = {
        "wall_s": round(wall_s, 2),
        "encoder_id": manifest.get("encoder_id"),
        "encoder_spec": manifest.get("encoder_spec"),
        "version": manifest.get("version"),
        "n_faqs": manifest.get("n_faqs"),
        "n_phrasings": manifest.get("n_variants"),
        "encode_s": timings.get("encode_s"),
        "encode_sentences_per_s": timings.get("encode_sentences_per_s") or parse_build_rate(output),
        "timings": timings,
        "query_encoder": manifest.get("query_encoder"),
    }
    print(f"  built in {build['wall_s']} s, encode {build['encode_sentences_per_s']} sentences/s", flush=True)

    port = free_port()
    ready_s, ready_body, rss_ready, runs = serve_and_load(
        faq + ["serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"], env,
        tmp / f"{slug(name)}.log", port, "/readyz", name, args, runs_dir)
    # what the build and the server say ran, next to what was asked (`auto` resolves to one of them)
    reported = {k: v for k, v in {**manifest, **ready_body}.items() if "runtime" in k}
    return {"name": name, "kind": FAQ_MATCH, "encoder": encoder, "runtime": runtime,
            "query_encoder": None if query_encoder is None else str(query_encoder),
            "query_encoder_reported": ready_body.get("query_encoder_id"),
            "runtime_reported": reported or None, "build": build,
            "ready_s": round(ready_s, 2), "rss_ready_mb": None if rss_ready is None else round(rss_ready, 1),
            "torch_threads": args.threads or int(env.get("FAQ_TORCH_THREADS", 2)), "env": extra, "runs": runs}


def run_floor(args: argparse.Namespace, tmp: Path, runs_dir: Path) -> dict:
    """bench/floor.py under the same loads: the HTTP floor of the breakdown."""
    port = free_port()
    argv = [sys.executable, str(REPO / "bench" / "floor.py"), "serve", "--port", str(port)]
    print(f"{FLOOR_NAME}: starting", flush=True)
    # the same FAQ_* settings as faq-match: they set uvicorn's connection limit and header deadline
    ready_s, info, rss_ready, runs = serve_and_load(argv, server_env(args, {}), tmp / "floor.log", port, "/readyz",
                                                    FLOOR_NAME, args, runs_dir)
    for run in runs:  # a constant answer: its accuracy says nothing
        if not run.get("failed"):
            run["top1_accuracy"] = run["answered_rate"] = None
    return {"name": FLOOR_NAME, "kind": FLOOR, "runtime": None, "runtime_reported": None, "build": None,
            "ready_s": round(ready_s, 2), "rss_ready_mb": None if rss_ready is None else round(rss_ready, 1),
            "body_bytes": info.get("body_bytes"), "runs": runs}


def run_peer(args: argparse.Namespace, tmp: Path, runs_dir: Path) -> dict:
    name = f"{PEER} {args.peer_model}"
    port = free_port()
    argv = [sys.executable, str(REPO / "bench" / "peer.py"), "serve", "--kb", str(args.kb), "--port", str(port),
            "--model", args.peer_model]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    print(f"{name}: starting (encodes the KB at start-up)", flush=True)
    ready_s, info, rss_ready, runs = serve_and_load(argv, server_env(args, {}), tmp / "peer.log", port, "/healthz",
                                                    name, args, runs_dir)
    build = {"wall_s": round(info["model_load_s"] + info["encode_s"] + info["index_build_s"], 2),
             "encoder_id": info["model"], "n_faqs": info["n_faqs"], "n_phrasings": info["n_phrasings"],
             "encode_s": info["encode_s"], "encode_sentences_per_s": info["encode_sentences_per_s"],
             "model_load_s": info["model_load_s"], "index_build_s": info["index_build_s"],
             "faiss_version": info.get("faiss_version")}
    return {"name": name, "kind": PEER, "runtime": "torch", "runtime_reported": {"runtime": "torch"},
            "build": build, "ready_s": round(ready_s, 2),
            "rss_ready_mb": None if rss_ready is None else round(rss_ready, 1),
            "torch_threads": info.get("torch_threads"), "runs": runs}


# ---------------------------------------------------------------- main

def configured_model_cache() -> Path:
    """FAQ_MODEL_CACHE as faq-match's settings read it, else the repository's var/models."""
    from app.settings import Settings

    return Settings().model_cache or REPO / "var" / "models"


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("FAQ_"):
        raise argparse.ArgumentTypeError(f"--faq-env wants FAQ_NAME=VALUE, got {text!r}")
    return key, value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kb", required=True, type=Path, help="KB file (.jsonl/.csv, the `faq kb import` format)")
    p.add_argument("--queries", required=True, type=Path, help="labelled query file for bench/load.py")
    p.add_argument("--requests", type=int, default=1000, help="requests per load run (default 1000)")
    p.add_argument("--concurrency", type=parse_concurrency, default=[1, 32], help="comma-separated (default 1,32)")
    p.add_argument("--max-seconds", type=float, default=120.0, help="time cap of each load run (default 120)")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--faq-encoder", type=parse_list, default=["minilm", "mpnet"],
                   help="faq-match encoders, comma-separated (default minilm,mpnet)")
    p.add_argument("--runtime", type=parse_list, default=[None],
                   help="FAQ_ENCODER_RUNTIME values, comma-separated (default: unset, faq-match's own default)")
    p.add_argument("--query-encoder", type=Path, default=None, metavar="DIR",
                   help="also run faq-match in balanced mode: built with mpnet, queries encoded by this "
                        "`faq train query-encoder` folder (FAQ_QUERY_ENCODER), once per --runtime")
    p.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                   help="run bench/floor.py (a constant FastAPI /match) under the same loads: the HTTP floor of "
                        "the breakdown (default on)")
    p.add_argument("--peer-model", default="minilm", help="the peer's model: minilm (default), mpnet or a folder")
    p.add_argument("--no-peer", action="store_true", help="faq-match only (no ratios)")
    p.add_argument("--threads", type=int, default=None, help="torch threads for both systems (default: each its own)")
    p.add_argument("--faq-env", type=_key_value, action="append", default=[], metavar="FAQ_NAME=VALUE",
                   help="extra faq-match setting, repeatable (inherited FAQ_* variables are dropped)")
    p.add_argument("--model-cache", type=Path, default=configured_model_cache(),
                   help="FAQ_MODEL_CACHE for both systems, so mpnet and ONNX exports are not redone per run "
                        "(default: $FAQ_MODEL_CACHE, else var/models)")
    p.add_argument("--build-timeout", type=float, default=3600.0)
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR)
    p.add_argument("--keep-tmp", action="store_true", help="keep the temporary data dirs and server logs")
    args = p.parse_args(argv)
    args.faq_env = dict(args.faq_env)
    args.kb, args.queries = args.kb.resolve(), args.queries.resolve()
    args.model_cache = args.model_cache.resolve()
    if args.query_encoder is not None:
        from models.encoders.query import is_query_encoder

        args.query_encoder = args.query_encoder.resolve()
        if not is_query_encoder(args.query_encoder):  # before minutes of building, not after
            p.error(f"--query-encoder: {args.query_encoder} is not a `faq train query-encoder` folder")
    return args


def _guarded(name: str, kind: str, run) -> dict:
    """One system's failure (a build error, a server that never gets ready) is reported in its row
    instead of discarding the other systems' minutes of measurements."""
    try:
        return run()
    except (RuntimeError, OSError, subprocess.TimeoutExpired, KeyError, ValueError) as exc:
        print(f"{name} failed: {exc}", file=sys.stderr, flush=True)
        return {"name": name, "kind": kind, "failed": str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                "error": str(exc)[-3000:], "runs": []}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from kb.records import KbValidationError, kb_groups
    from kb.files import read_kb, read_queries

    try:  # fail before minutes of building, not after
        groups = kb_groups(read_kb(args.kb))
        queries = read_queries(args.queries)
    except (OSError, KbValidationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    # SIGTERM must run the finally blocks below, or the servers outlive this script
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    runs_dir = args.out_dir / "compare_runs"
    runs_dir.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="faq-compare-"))
    load_before = os.getloadavg()
    systems: list[dict] = []
    try:
        for encoder in args.faq_encoder:
            for runtime in args.runtime:
                systems.append(_guarded(system_name(encoder, runtime), FAQ_MATCH,
                                        lambda e=encoder, r=runtime: run_faq_match(e, r, args, tmp, runs_dir)))
        if args.query_encoder is not None:
            for runtime in args.runtime:
                systems.append(_guarded(
                    system_name("mpnet", runtime, True), FAQ_MATCH,
                    lambda r=runtime: run_faq_match("mpnet", r, args, tmp, runs_dir, query_encoder=args.query_encoder)))
        if args.floor:
            systems.append(_guarded(FLOOR_NAME, FLOOR, lambda: run_floor(args, tmp, runs_dir)))
        if not args.no_peer:
            systems.append(_guarded(f"{PEER} {args.peer_model}", PEER, lambda: run_peer(args, tmp, runs_dir)))
    finally:
        if args.keep_tmp:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    report = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(["bench/compare.py", *argv]),
        "cwd": os.getcwd(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), **cpu_info(),
                    "python": platform.python_version(),
                    "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "kb": {"path": str(args.kb), "n_faqs": len(groups), "n_phrasings": sum(len(v) for v in groups.values())},
        "queries": {"path": str(args.queries), "n": len(queries),
                    "n_labelled": sum(q.faq_id is not None for q in queries)},
        "settings": {"requests": args.requests, "concurrency": args.concurrency, "max_seconds": args.max_seconds,
                     "top_k": args.top_k, "threads": args.threads, "faq_env": args.faq_env,
                     "peer_model": None if args.no_peer else args.peer_model,
                     "query_encoder": None if args.query_encoder is None else str(args.query_encoder),
                     "floor": args.floor},
        "systems_run": [{"name": s["name"], "kind": s["kind"], "failed": s.get("failed")} for s in systems],
        "systems": systems,
        "comparisons": build_comparisons(systems),
        "breakdown": build_breakdown(systems),
    }
    (args.out_dir / "compare.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md = render_markdown(report)
    (args.out_dir / "compare.md").write_text(md, encoding="utf-8")
    print(md)
    print(f"wrote {args.out_dir / 'compare.md'} and compare.json")
    failed = any(s.get("failed") for s in systems)
    return 1 if failed or any(r.get("failed") or r.get("errors") for s in systems for r in s["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
