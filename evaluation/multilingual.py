"""Multilingual mode's routes and their measurement on the realistic sets' translated queries.

    faq eval multilingual fit [--sets energy,council,grocery,campus_it] [--out FILE]
    faq eval multilingual calibrate [--sets ...] [--routes FILE]
    faq eval multilingual study [--sets ...] [--out DIR]
    faq eval multilingual identify [--sets ...] [--lingua]

`fit` writes models/encoders/multilingual-routes.json: per language, the mix of mpnet's and e5's cosines and
the affine map that puts it on mpnet's scale (models/encoders/multilingual.py). It reads the dev split only:
`dev.<lang>.jsonl` (queries written in that language, each with the English query it was written from) and the
English KB. With `--mix`, the mix weight is the one that ranks the gold FAQ first most often (ties: the least mpnet,
which then need not run), else e5 alone; the map is the least-squares fit of the English original's mpnet score of each of the
query's top FAQs (and its gold one) from the mixed score, so a Spanish question scores what its English
twin would. `calibrate` (after `fit`) matches each language's dev queries through the product path
(evaluation/scratch.py) and fits the curve that puts the decision model's probability on that language's
scale (models/encoders/multilingual.py `LanguageCurve`), with the expected-precision table of all languages'
calibrated queries, a `*` curve over all of them for the languages without queries, and the `native` one. `study`
measures the first stage (top-1 of the FAQ score as the pipeline computes it, answers
as evidence) on the test split: mpnet alone, e5 alone and the fitted route, per language and set, and the
native Spanish KB (`faq.es.jsonl`) with the Spanish queries.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.encoders.base import SharedEncoder

DATA = Path(__file__).resolve().parent / "data"
SETS = ("energy", "council", "grocery", "campus_it")
LANGUAGES = ("es", "de", "fr")
#: the answer's share of a FAQ's score (FAQ_ANSWER_WEIGHT's default)
ANSWER_WEIGHT = 0.6
MIX_GRID = tuple(round(x, 2) for x in np.linspace(0.0, 1.0, 21))
#: each dev query's FAQs the scale is fitted on: its best ones under the mix, and its gold one
FIT_TOP = 5


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Kb:
    faq_ids: list[str]
    phrasing_faq: np.ndarray  # (n_phrasings,) index into faq_ids
    phrasings: list[str]
    answers: list[str]

    @classmethod
    def read(cls, name: str, language: str = "en") -> "Kb":
        rows = read_jsonl(DATA / name / ("faq.jsonl" if language == "en" else f"faq.{language}.jsonl"))
        faq_ids = list(dict.fromkeys(r["faq_id"] for r in rows))
        answer = {r["faq_id"]: r["answer"] for r in rows if r.get("answer")}
        index = {f: i for i, f in enumerate(faq_ids)}
        return cls(faq_ids, np.array([index[r["faq_id"]] for r in rows]), [r["question"] for r in rows],
                   [answer[f] for f in faq_ids])


class Encoders:
    """mpnet and e5, each text encoded once per process (queries and passages apart for e5)."""

    def __init__(self, cache_dir: str | None = None):
        from models.encoders.load import load_encoder
        from models.encoders.multilingual import E5Encoder

        self.mpnet = SharedEncoder(load_encoder("mpnet", cache_dir=cache_dir), memo=True)
        self.e5 = E5Encoder()
        self._memo: dict[tuple[bool, str], np.ndarray] = {}

    def e5_side(self, texts: list[str], query: bool) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if (query, t) not in self._memo]
        if missing:
            vecs = self.e5.encode_queries(missing) if query else self.e5.encode(missing)
            self._memo.update({(query, t): v for t, v in zip(missing, vecs)})
        return np.stack([self._memo[(query, t)] for t in texts]) if texts else np.zeros((0, 384), np.float32)


def faq_scores(q: np.ndarray, phr: np.ndarray, ans: np.ndarray, kb: Kb) -> np.ndarray:
    """(n_queries, n_faqs): (1 - w) * best phrasing cosine + w * answer cosine, as the pipeline scores a FAQ."""
    cos = q @ phr.T
    best = np.full((len(q), len(kb.faq_ids)), -np.inf, np.float32)
    for j, f in enumerate(kb.phrasing_faq):
        best[:, f] = np.maximum(best[:, f], cos[:, j])
    return (1 - ANSWER_WEIGHT) * best + ANSWER_WEIGHT * (q @ ans.T)


@dataclass
class Split:
    """One set's queries of one language and split, scored by mpnet and e5, with the English twins' mpnet scores."""

    mpnet: np.ndarray
    e5: np.ndarray
    english: np.ndarray | None
    gold: np.ndarray  # index of the gold FAQ, -1 out of scope


def score_split(enc: Encoders, kb: Kb, queries: list[dict], english: list[str] | None) -> Split:
    m_phr, m_ans = enc.mpnet.encode(kb.phrasings), enc.mpnet.encode(kb.answers)
    e_phr, e_ans = enc.e5_side(kb.phrasings, False), enc.e5_side(kb.answers, False)
    texts = [q["query"] for q in queries]
    gold = np.array([kb.faq_ids.index(q["faq_id"]) if q["faq_id"] else -1 for q in queries])
    return Split(faq_scores(enc.mpnet.encode(texts), m_phr, m_ans, kb),
                 faq_scores(enc.e5_side(texts, True), e_phr, e_ans, kb),
                 None if english is None else faq_scores(enc.mpnet.encode(english), m_phr, m_ans, kb), gold)


def top1(scores: np.ndarray, gold: np.ndarray) -> float:
    inside = gold >= 0
    return float(np.mean(scores[inside].argmax(1) == gold[inside])) if inside.any() else float("nan")


def fit_route(splits: list[Split], grid: tuple[float, ...] = (0.0,)) -> dict:
    """The mix weight of mpnet among `grid` (dev top-1, ties to less mpnet) and the map onto mpnet's English
    scale. The default grid is e5 alone: mixing mpnet in moved dev top-1 by -3..+4 points per language, within
    the noise of ~100 queries, and would encode every such query twice (docs/results.md)."""
    def accuracy(lam: float) -> float:
        right = total = 0
        for s in splits:
            inside = s.gold >= 0
            mixed = lam * s.mpnet + (1 - lam) * s.e5
            right += int(np.sum(mixed[inside].argmax(1) == s.gold[inside]))
            total += int(inside.sum())
        return right / max(total, 1)

    by_lambda = {lam: accuracy(lam) for lam in grid}
    best = max(by_lambda.values())
    lam = min(x for x, acc in by_lambda.items() if acc >= best - 1e-9)
    xs, ys = [], []
    for s in splits:
        mixed = lam * s.mpnet + (1 - lam) * s.e5
        for row in range(len(mixed)):
            cols = set(np.argsort(-mixed[row])[:FIT_TOP].tolist()) | ({int(s.gold[row])} if s.gold[row] >= 0 else set())
            for c in cols:
                xs.append(mixed[row, c])
                ys.append(s.english[row, c])
    scale, offset = np.polyfit(np.asarray(xs, np.float64), np.asarray(ys, np.float64), 1)
    return {"mpnet": round(float(scale * lam), 5), "e5": round(float(scale * (1 - lam)), 5),
            "offset": round(float(offset), 5), "mix": lam, "dev_top1": round(best, 4),
            "dev_top1_by_mix": {str(k): round(v, 4) for k, v in by_lambda.items()}, "pairs": len(xs)}


def splits_of(enc: Encoders, sets: list[str], language: str, split: str, kb_language: str = "en") -> dict[str, Split]:
    out = {}
    for name in sets:
        path = DATA / name / f"{split}.{language}.jsonl"
        if not path.exists() or (kb_language != "en" and not (DATA / name / f"faq.{kb_language}.jsonl").exists()):
            continue
        rows = read_jsonl(path)
        out[name] = score_split(enc, Kb.read(name, kb_language), rows, [r["en"] for r in rows])
    return out


def fit(sets: list[str], out: Path, cache_dir: str | None, mix: bool = False) -> dict:
    enc = Encoders(cache_dir)
    routes, report = {}, {}
    for language in LANGUAGES:
        splits = list(splits_of(enc, sets, language, "dev").values())
        if not splits:
            continue
        route = fit_route(splits, MIX_GRID if mix else (0.0,))
        report[language] = route
        routes[language] = {k: route[k] for k in ("mpnet", "e5", "offset")}
        print(f"{language}: mix {route['mix']} dev top-1 {route['dev_top1']:.3f} -> {routes[language]}", file=sys.stderr)
    if routes:  # languages without queries of their own: the mean of the fitted ones
        routes["*"] = {k: round(float(np.mean([r[k] for r in routes.values()])), 5) for k in ("mpnet", "e5", "offset")}
    body = {"about": "written by `faq eval multilingual fit` from the dev queries of "
                     + ", ".join(sets) + "; English is always mpnet alone", "routes": routes, "fit": report}
    out.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return body


def top_scores(sets: list[str], language: str, split: str, workdir: Path, encoder: object,
               native: bool = False) -> tuple[list, list]:
    """Each query's top probability and whether its FAQ is the gold one, through the product path (each set's
    KB imported and built in `workdir` by evaluation/scratch.py, matched as `faq serve` matches); `native`:
    asked of the set's KB written in the query's language (faq.<language>.jsonl), where there is one."""
    from evaluation.scratch import scratch_pipeline

    scores, right = [], []
    for name in sets:
        path = DATA / name / (f"{split}.jsonl" if language == "en" else f"{split}.{language}.jsonl")
        kb = DATA / name / (f"faq.{language}.jsonl" if native else "faq.jsonl")
        if not path.exists() or not kb.exists():
            continue
        queries = read_jsonl(path)
        where = f"{name}-{language}" if native else name
        scratch = scratch_pipeline(kb, workdir=workdir / where, encoder=encoder, spec="multilingual",
                                   settings_update={"languages": [language]} if native else None,
                                   fingerprint={"kb": where, "encoder": "multilingual"})
        try:
            results = scratch.pipeline.match([q["query"] for q in queries], 5, 0.5)
        finally:
            scratch.store.close()
        for q, r in zip(queries, results):
            scores.append(r.matches[0].score if r.matches else 0.0)
            right.append(bool(r.matches) and r.matches[0].faq_id == q["faq_id"])
    return scores, right


def platt_curve(p: list, right: list) -> tuple[float, float, np.ndarray]:
    """(a, b) of p' = sigmoid(a logit(p) + b) fitted on whether each query was right, and the calibrated p'."""
    from models.scoring import fit_platt

    q = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    x = np.log(q / (1 - q))
    a, b = fit_platt(x, np.asarray(right, dtype=np.float64))
    return float(a), float(b), 1 / (1 + np.exp(-(a * x + b)))


def calibrate(sets: list[str], out: Path, workdir: Path, cache_dir: str | None) -> dict:
    """Per language, the curve from the decision model's probability to that language's (Platt on the logit,
    dev queries of every set, out-of-scope ones included), all sharing the expected-precision table of their
    calibrated queries together (the mean calibrated score above each threshold, index/decision.py
    `traffic_table`); `*` (one curve over all those queries, for languages without their own) and `native` ->
    the routes file's `calibration`."""
    from index.decision import traffic_table
    from models.encoders.load import load_encoder

    encoder = SharedEncoder(load_encoder("multilingual", cache_dir=cache_dir))
    encoder.inner.language_curves = {}  # the model's own probabilities are what is fitted
    body = json.loads(out.read_text(encoding="utf-8"))
    curves, report = {}, {}
    pooled_p, pooled_right, pooled_calibrated = [], [], []
    for language in LANGUAGES:
        p, right = top_scores(sets, language, "dev", workdir, encoder)
        if not p:
            continue
        a, b, calibrated = platt_curve(p, right)
        curves[language] = {"a": round(a, 5), "b": round(b, 5)}
        pooled_p, pooled_right = pooled_p + list(p), pooled_right + list(right)
        pooled_calibrated += calibrated.tolist()
        report[language] = {"queries": len(p), "right": float(np.mean(right)), "mean_p": float(np.mean(p)),
                            "mean_calibrated": float(np.mean(calibrated))}
        print(f"{language}: a {a:.3f} b {b:.3f} over {len(p)} dev queries (right {np.mean(right):.3f}, mean p "
              f"{np.mean(p):.3f} -> {np.mean(calibrated):.3f})", file=sys.stderr)
    if curves:
        # Each language's curve is its own, but its expected-precision table is read off all the languages'
        # calibrated queries together: ~140 answered dev queries per language left each table 0.07-0.08 off
        # on test in two languages; pooled, all three came within 0.05 (docs/results.md).
        table = traffic_table(pooled_calibrated)
        for curve in curves.values():
            curve["table"] = table
        # a language without queries of its own (it, pt, nl): one curve fitted on all the others' queries
        a, b, calibrated = platt_curve(pooled_p, pooled_right)
        curves["*"] = {"a": round(a, 5), "b": round(b, 5), "table": traffic_table(calibrated)}
        print(f"*: a {a:.3f} b {b:.3f} over {len(pooled_p)} dev queries of {', '.join(LANGUAGES)}", file=sys.stderr)
    # questions in the KB's own language (not English): one curve for all, from the KBs written in them
    p, right = [], []
    for language in LANGUAGES:
        got = top_scores(sets, language, "dev", workdir, encoder, native=True)
        p, right = p + got[0], right + got[1]
    if p:
        a, b, calibrated = platt_curve(p, right)
        curves["native"] = {"a": round(a, 5), "b": round(b, 5), "table": traffic_table(calibrated)}
        report["native"] = {"queries": len(p), "right": float(np.mean(right)), "mean_p": float(np.mean(p)),
                            "mean_calibrated": float(np.mean(calibrated))}
        print(f"native: a {a:.3f} b {b:.3f} over {len(p)} dev queries (right {np.mean(right):.3f}, mean p "
              f"{np.mean(p):.3f} -> {np.mean(calibrated):.3f})", file=sys.stderr)
    body["calibration"] = curves
    body["calibration_fit"] = report
    out.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return body


def study(sets: list[str], out: Path, cache_dir: str | None) -> dict:
    from models.encoders.multilingual import read_routes

    enc = Encoders(cache_dir)
    routes = read_routes()
    rows = []
    for language in ("en",) + LANGUAGES:
        for name in sets:
            split = (DATA / name / ("test.jsonl" if language == "en" else f"test.{language}.jsonl"))
            if not split.exists():
                continue
            queries = read_jsonl(split)
            s = score_split(enc, Kb.read(name), queries, None)
            r = routes.get(language) or routes["*"]
            fused = r["mpnet"] * s.mpnet + r["e5"] * s.e5 + r["offset"]
            rows.append({"kb": name, "kb_language": "en", "language": language, "n": int((s.gold >= 0).sum()),
                         "mpnet": top1(s.mpnet, s.gold), "e5": top1(s.e5, s.gold), "route": top1(fused, s.gold)})
        for name in sets:  # the native KBs: the set written in the language, asked in it
            if language == "en" or not (DATA / name / f"faq.{language}.jsonl").exists():
                continue
            queries = read_jsonl(DATA / name / f"test.{language}.jsonl")
            s = score_split(enc, Kb.read(name, language), queries, None)
            r = routes.get(language) or routes["*"]
            fused = r["mpnet"] * s.mpnet + r["e5"] * s.e5 + r["offset"]
            rows.append({"kb": name, "kb_language": language, "language": language, "n": int((s.gold >= 0).sum()),
                         "mpnet": top1(s.mpnet, s.gold), "e5": top1(s.e5, s.gold), "route": top1(fused, s.gold)})
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    lines = ["| KB | KB language | query language | queries | mpnet | e5 | route |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['kb']} | {r['kb_language']} | {r['language']} | {r['n']} | {r['mpnet']:.3f} | {r['e5']:.3f} | "
              f"{r['route']:.3f} |" for r in rows]
    (out / "study.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return {"rows": rows}


@dataclass(frozen=True)
class _Found:
    language: str


def _lingua(detector: object):
    """lingua's detector as `detect(text).language`, each text detected once (its time is measured)."""
    def detect(text: str) -> _Found:
        found = detector.detect_language_of(text)
        return _Found(found.iso_code_639_1.name.lower() if found else "en")
    return detect


def identify(sets: list[str], out: Path, lingua: bool) -> dict:
    """How often the detected language is the one a query was written in, per language and for queries of
    3+ words and fewer (dev and test of every set); with `lingua`, lingua-language-detector's two modes on the
    same queries (installed by hand: it is not a dependency)."""
    import time

    from models.language import SUPPORTED, LanguageDetector

    queries = []
    for name in sets:
        for split in ("dev", "test"):
            for language in ("en",) + LANGUAGES:
                path = DATA / name / (f"{split}.jsonl" if language == "en" else f"{split}.{language}.jsonl")
                if path.exists():
                    queries += [(language, r["query"]) for r in read_jsonl(path)]
    detectors: dict[str, object] = {"py3langid": LanguageDetector().detect}
    if lingua:
        from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

        chosen = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in SUPPORTED]
        for mode, builder in (("lingua high", LanguageDetectorBuilder.from_languages(*chosen)),
                              ("lingua low", LanguageDetectorBuilder.from_languages(*chosen).with_low_accuracy_mode())):
            detectors[mode] = _lingua(builder.with_preloaded_language_models().build())
    rows = {}
    for name, detect in detectors.items():
        t = time.perf_counter()
        hits = [(language, len(text.split()) >= 3, detect(text).language == language) for language, text in queries]
        ms = (time.perf_counter() - t) * 1000 / max(len(queries), 1)
        row = {"ms_per_query": round(ms, 4),
               "3+ words": round(float(np.mean([ok for _, long, ok in hits if long])), 4),
               "1-2 words": round(float(np.mean([ok for _, long, ok in hits if not long])), 4)}
        for language in ("en",) + LANGUAGES:
            sub = [ok for lang, long, ok in hits if lang == language and long]
            row[f"{language} 3+ words"] = round(float(np.mean(sub)), 4) if sub else None
        rows[name] = row
    body = {"queries": len(queries), "by_detector": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "identify.json").write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(body, indent=2))
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="faq eval multilingual", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("fit", "calibrate", "study", "identify"):
        p = sub.add_parser(name)
        p.add_argument("--sets", default=",".join(SETS))
        p.add_argument("--model-cache", default=None, help="where mpnet is reassembled (default var/models)")
    sub.choices["fit"].add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "models" /
                                    "encoders" / "multilingual-routes.json")
    sub.choices["fit"].add_argument("--mix", action="store_true", help="also try mixing mpnet's cosine in")
    sub.choices["calibrate"].add_argument("--routes", type=Path, default=Path(__file__).resolve().parents[1] /
                                          "models" / "encoders" / "multilingual-routes.json")
    sub.choices["calibrate"].add_argument("--workdir", type=Path, default=Path("runs/multilingual/scratch"))
    sub.choices["study"].add_argument("--out", type=Path, default=Path("runs/multilingual"))
    sub.choices["identify"].add_argument("--out", type=Path, default=Path("runs/multilingual"))
    sub.choices["identify"].add_argument("--lingua", action="store_true", help="also lingua-language-detector")
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    if args.command == "fit":
        fit(sets, args.out, args.model_cache, args.mix)
    elif args.command == "calibrate":
        calibrate(sets, args.routes, args.workdir, args.model_cache)
    elif args.command == "identify":
        identify(sets, args.out, args.lingua)
    else:
        study(sets, args.out, args.model_cache)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
