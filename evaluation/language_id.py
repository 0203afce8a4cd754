"""Language identification (models/language.py) on the realistic sets and on a held-out set of the queries it
used to get wrong.

    faq eval language-id [--sets energy,council,grocery,campus_it] [--heldout FILE] [--out DIR]

The realistic sets: every dev and test query of the four sets in English and as written again in Spanish,
German and French (`evaluation/data/<set>/{dev,test}[.es|.de|.fr].jsonl`): how often the detected language is
the query's (3+ words, and 1-2), and what a KB's `languages` gate does with them: the share of es/de/fr
queries an English KB (`languages=en`) refuses, the English ones it refuses by mistake, and the queries a KB in
their own language refuses (none should be); the same again with each query's first letter capitalised, as
people who write properly send them.

The held-out set (`evaluation/data/language_id/heldout.jsonl`, written for this measurement, never used to
choose anything by looking at its queries one by one) has three kinds of query, each line
{"query", "language", "kind"}:
  script  written in a script no supported language uses (Japanese, Chinese, Hebrew, Russian, Arabic, Korean,
          Greek): it must be reported as no supported language, and refused by any gated KB;
  names   English with foreign names or words (umlauts, accents): English, and never refused by an English KB;
  mixed   words of two languages: the language most of its words are in (a supported one, or for a query
          mostly in another script, none of them), and never refused by a KB in that language.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
SETS = ("energy", "council", "grocery", "campus_it")
LANGUAGES = ("en", "es", "de", "fr")
HELD_OUT = DATA / "language_id" / "heldout.jsonl"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def realistic_queries(sets: list[str]) -> list[tuple[str, str]]:
    """(language, query) of every dev and test query of `sets`, in English and the three translations."""
    queries = []
    for name in sets:
        for split in ("dev", "test"):
            for language in LANGUAGES:
                path = DATA / name / (f"{split}.jsonl" if language == "en" else f"{split}.{language}.jsonl")
                if path.exists():
                    queries += [(language, r["query"]) for r in read_jsonl(path)]
    return queries


def sentence_case(queries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The queries as people who write properly send them: a capital first letter ("Cómo ...", "Über ...")."""
    return [(language, text[:1].upper() + text[1:]) for language, text in queries]


def _share(flags: list[bool]) -> float | None:
    return round(float(np.mean(flags)), 4) if flags else None


def measure_realistic(detect: Callable[[str], Any], queries: list[tuple[str, str]]) -> dict:
    rows = [(language, text, detect(text)) for language, text in queries]
    long = [(lang, d) for lang, text, d in rows if d.words >= 3]
    short = [(lang, d) for lang, text, d in rows if d.words < 3]
    out: dict[str, Any] = {
        "queries": len(rows),
        "accuracy 3+ words": _share([d.language == lang for lang, d in long]),
        "accuracy 1-2 words": _share([d.language == lang for lang, d in short]),
        "1-2 word queries": len(short),
    }
    for language in LANGUAGES:
        out[f"{language} 3+ words"] = _share([d.language == lang for lang, d in long if lang == language])
    others = [(lang, d) for lang, _, d in rows if lang != "en"]
    out["refused by languages=en, es/de/fr"] = _share([d.is_foreign(["en"]) for _, d in others])
    out["refused by languages=en, es/de/fr 3+ words"] = _share([d.is_foreign(["en"]) for _, d in others
                                                                if d.words >= 3])
    out["English refused by languages=en"] = sum(d.is_foreign(["en"]) for lang, _, d in rows if lang == "en")
    out["English queries"] = sum(lang == "en" for lang, _, _ in rows)
    out["refused by a KB in their own language"] = sum(d.is_foreign([lang]) for lang, _, d in rows)
    return out


def measure_held_out(detect: Callable[[str], Any], rows: list[dict], supported: tuple[str, ...]) -> dict:
    by: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    misses: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        d = detect(row["query"])
        kind, language = row["kind"], row["language"]
        in_supported = language in supported
        right = d.language == language if in_supported else d.language not in supported
        by[kind]["right"].append(right)
        if not right:
            misses[kind].append(f"{row['query']} -> {d.language}")
        if kind == "script":
            by[f"script {language}"]["right"].append(right)
            by[kind]["named"].append(d.language == language)
            by[kind]["refused by languages=en"].append(d.is_foreign(["en"]))
            by[kind]["refused by languages=all seven"].append(d.is_foreign(list(supported)))
        elif kind == "names":
            by[kind]["refused by languages=en"].append(d.is_foreign(["en"]))
        else:
            if in_supported:
                by[kind]["refused by a KB in its majority language"].append(d.is_foreign([language]))
            else:
                by[kind]["refused by languages=en, mostly another script"].append(d.is_foreign(["en"]))
    out: dict[str, Any] = {"queries": len(rows)}
    for kind, measures in by.items():
        out[kind] = {"n": len(measures["right"])}
        for name, flags in measures.items():
            if name.startswith("refused"):
                out[kind][name] = f"{sum(flags)} of {len(flags)}"
            else:
                out[kind][name] = _share(flags)
    out["wrong"] = dict(misses)
    return out


def identify(sets: list[str], held_out: Path, out: Path | None) -> dict:
    from evaluation.machine import cpu_info
    from models.language import SUPPORTED, detector

    detect = detector().detect  # the one the service asks
    queries = realistic_queries(sets)
    rows = read_jsonl(held_out)
    detect("warm up")
    t = time.perf_counter()
    realistic = measure_realistic(detect, queries)
    ms = (time.perf_counter() - t) * 1000 / max(len(queries), 1)
    body = {"cpu": cpu_info()["cpu_model"], "ms_per_query (realistic)": round(ms, 4), "realistic": realistic,
            "realistic, sentence case": measure_realistic(detect, sentence_case(queries)),
            "held_out": measure_held_out(detect, rows, SUPPORTED)}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "language_id.json").write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(body, indent=2, ensure_ascii=False))
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="faq eval language-id", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--heldout", type=Path, default=HELD_OUT)
    parser.add_argument("--out", type=Path, default=Path("runs/language_id"))
    args = parser.parse_args(argv)
    identify([s for s in args.sets.split(",") if s], args.heldout, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
