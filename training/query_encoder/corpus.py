"""The corpus a query encoder is fitted on: question-like sentences from the public datasets' train splits
and the KB files given (see the package docstring for what is read and what never is)."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Callable, Iterable, Sequence



def _clean(text: str) -> str:
    return " ".join(str(text).split())


def _qqp(src: Path) -> Iterable[str]:
    with open(src / "dev.tsv", encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) >= 3:
                yield row[1]
                yield row[2]


def _mrpc(src: Path) -> Iterable[str]:
    with open(src / "msr-para-train.tsv", encoding="utf-8-sig") as f:
        for i, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)):
            if i and len(row) >= 5:
                yield row[3]
                yield row[4]


def _stsb(src: Path) -> Iterable[str]:
    with open(src / "sts-train.csv", encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 7:
                yield parts[5]
                yield parts[6]


def _clinc(src: Path) -> Iterable[str]:
    data = json.loads((src / "data_full.json").read_text(encoding="utf-8"))
    for split in ("train", "val", "oos_train", "oos_val"):
        for text, _ in data.get(split, []):
            yield text


def _banking(src: Path) -> Iterable[str]:
    with open(src / "train.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            yield row["text"]


def _wikiqa(src: Path) -> Iterable[str]:
    """Train questions and their candidate answer sentences (answers are what FAQ sides look like)."""
    with open(src / "WikiQA-train.txt", encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            yield from parts[:2]


def _trecqa(src: Path) -> Iterable[str]:
    with open(src / "train.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            yield row["qtext"]


SOURCES: dict[str, Callable[[Path], Iterable[str]]] = {
    "qqp_bimpm": _qqp, "mrpc": _mrpc, "stsb": _stsb, "clinc150": _clinc, "banking77": _banking,
    "wikiqa": _wikiqa, "trecqa": _trecqa,
}


def corpus_sentences(data_dir: str | Path | None, kb_files: Sequence[str | Path] = ()) -> tuple[list[str], dict]:
    """Distinct sentences (first occurrence order) and how many each source gave. A missing dataset folder
    is skipped and reported; a KB file gives its phrasings and real answers."""
    from kb.records import is_placeholder
    from kb.files import read_kb

    seen: dict[str, None] = {}
    counts: dict[str, int] = {}

    def add(name: str, texts: Iterable[str]) -> None:
        before = len(seen)
        for text in texts:
            text = _clean(text)
            if 2 <= len(text) <= 500:
                seen.setdefault(text, None)
        counts[name] = len(seen) - before

    if data_dir is not None:
        for name, read in SOURCES.items():
            folder = Path(data_dir) / name
            if folder.is_dir():
                add(name, read(folder))
            else:
                counts[name] = 0
    for path in kb_files:
        records = read_kb(path)
        answers = {r.answer for r in records if r.answer and not is_placeholder(r.answer)}
        add(f"kb:{Path(path).parent.name}/{Path(path).name}", [r.question for r in records] + sorted(answers))
    return list(seen), counts


