"""Converters from public benchmark datasets to this project's exchange formats (`faq data prepare`).

Outputs, all written into one folder:
- `kb.jsonl`: the knowledge base, one line per question variant
  `{"faq_id", "question", "answer", "tags"}` (the format `faq kb import` reads).
- `dev.jsonl` / `test.jsonl`: evaluation queries `{"query", "faq_id"}`; `faq_id` is null for
  out-of-scope queries (CLINC150's `oos`), i.e. queries the service should leave unanswered.
- `pairs_<split>.tsv`: labelled sentence pairs `label\\tq1\\tq2` (label 1 = paraphrase) for the
  pair datasets (QQP, MRPC, STS-B), usable as `faq train msem --pairs`.
- `dataset.json`: what was written, counts, the source folder and caveats.

The intent datasets (CLINC150, BANKING77) have no answers: each intent becomes one FAQ whose
variants are its training utterances and whose answer is a readable placeholder
`"[intent: card_arrival]"`. Matching quality does not depend on the answer text.

Every file is written to a temporary name in the output folder and moved into place with
`os.replace`, so re-running overwrites atomically (a reader never sees a half-written file).
"""
from __future__ import annotations

import csv
import json
import os
import random
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

DATASETS = ("clinc150", "banking77", "qqp", "mrpc", "stsb")

#: STS-B scores are 0-5; pairs scoring at least this are labelled paraphrases (a common binarisation)
STSB_PARAPHRASE_MIN_SCORE = 4.0
#: BANKING77 has no dev split; this share of each intent's training utterances is held out as dev
BANKING77_DEV_SHARE = 0.10


class DatasetError(ValueError):
    """The source folder does not hold the expected files or they do not parse."""


@dataclass
class PrepareReport:
    dataset: str
    src: str
    out: str
    files: dict[str, int] = field(default_factory=dict)  # file name -> rows written
    counts: dict[str, int] = field(default_factory=dict)  # named counts (faqs, oos queries, ...)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "src": self.src,
            "out": self.out,
            "files": self.files,
            "counts": self.counts,
            "notes": self.notes,
        }

    def format(self) -> str:
        lines = [f"{self.dataset}: {self.src} -> {self.out}"]
        for name, n in self.files.items():
            lines.append(f"  {name:<18} {n:>8,} rows")
        for name, n in self.counts.items():
            lines.append(f"  {name:<18} {n:>8,}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# atomic writers


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_write(path: Path, write: Callable[[object], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; give the final file the usual permissions
        os.chmod(tmp, 0o666 & ~_current_umask())
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        # never leave a temp file behind (including on Ctrl-C)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    rows = list(rows)

    def write(fh) -> None:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    _atomic_write(path, write)
    return len(rows)


def write_pairs_tsv(path: Path, pairs: Iterable[tuple[int, str, str]]) -> int:
    """`label\\tq1\\tq2` lines; tabs/newlines inside texts are replaced by spaces so columns stay intact."""
    pairs = list(pairs)

    def clean(text: str) -> str:
        return " ".join(text.replace("\t", " ").split())

    def write(fh) -> None:
        for label, q1, q2 in pairs:
            fh.write(f"{int(label)}\t{clean(q1)}\t{clean(q2)}\n")

    _atomic_write(path, write)
    return len(pairs)


# ---------------------------------------------------------------------------------------------
# helpers


def placeholder_answer(intent: str) -> str:
    return f"[intent: {intent}]"


def intent_kb_rows(utterances: Iterable[tuple[str, str]], tags: list[str]) -> list[dict]:
    """(utterance, intent) -> KB rows, one per distinct (intent, utterance); order kept."""
    seen: set[tuple[str, str]] = set()
    rows = []
    for text, intent in utterances:
        text = text.strip()
        if not text or (intent, text) in seen:
            continue
        seen.add((intent, text))
        rows.append({"faq_id": intent, "question": text, "answer": placeholder_answer(intent), "tags": tags})
    return rows


def _require(path: Path) -> Path:
    if not path.is_file():
        raise DatasetError(f"missing source file {path}")
    return path


# ---------------------------------------------------------------------------------------------
# converters


def prepare_clinc150(
    src: Path, out: Path, variant: str = "data_full.json",
    domains: Sequence[str] | None = None, exclude_domains: Sequence[str] | None = None,
) -> PrepareReport:
    """CLINC150: KB = in-scope train; dev = val + oos_val; test = test + oos_test (oos -> faq_id null).

    `domains` / `exclude_domains` (names from domains.json) keep only some of the 10 domains' intents,
    e.g. to train on 8 domains and measure how the encoder generalises to FAQs of the other 2. Queries
    of dropped intents are left out (not turned into out-of-scope queries); the OOS queries stay."""
    path = _require(src / variant)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not JSON ({exc})") from exc
    for key in ("train", "val", "test", "oos_val", "oos_test"):
        if key not in data:
            raise DatasetError(f"{path}: missing split {key!r}")
    report = PrepareReport("clinc150", str(src), str(out))
    keep = _clinc_intents(src, domains, exclude_domains)
    if keep is not None:
        for key in ("train", "val", "test"):
            data[key] = [(t, i) for t, i in data[key] if i in keep or i == "oos"]
        report.notes.append(f"domains kept: {', '.join(sorted(set(keep.values())))}")
    kb = intent_kb_rows(((t, i) for t, i in data["train"] if i != "oos"), tags=["clinc150"])
    report.files["kb.jsonl"] = write_jsonl(out / "kb.jsonl", kb)

    def queries(in_scope: list, oos: list) -> list[dict]:
        rows = [{"query": t, "faq_id": i} for t, i in in_scope if i != "oos"]
        rows += [{"query": t, "faq_id": None} for t, _ in oos]
        return rows

    dev = queries(data["val"], data["oos_val"])
    test = queries(data["test"], data["oos_test"])
    report.files["dev.jsonl"] = write_jsonl(out / "dev.jsonl", dev)
    report.files["test.jsonl"] = write_jsonl(out / "test.jsonl", test)
    report.counts["faqs"] = len({r["faq_id"] for r in kb})
    report.counts["dev_oos"] = sum(r["faq_id"] is None for r in dev)
    report.counts["test_oos"] = sum(r["faq_id"] is None for r in test)
    report.notes.append("answers are placeholders '[intent: NAME]': the dataset has no answers")
    report.notes.append("oos_train is not used (the KB holds in-scope intents only)")
    return report


def _clinc_intents(
    src: Path, domains: Sequence[str] | None, exclude_domains: Sequence[str] | None
) -> dict[str, str] | None:
    """intent -> domain for the selected domains, None when no selection was asked for."""
    if not domains and not exclude_domains:
        return None
    path = _require(src / "domains.json")
    by_domain: dict[str, list[str]] = json.loads(path.read_text(encoding="utf-8"))
    unknown = sorted((set(domains or ()) | set(exclude_domains or ())) - set(by_domain))
    if unknown:
        raise DatasetError(f"unknown CLINC150 domain(s) {unknown}; domains are {', '.join(sorted(by_domain))}")
    chosen = [d for d in by_domain if (not domains or d in domains) and d not in (exclude_domains or ())]
    if not chosen:
        raise DatasetError("the domain selection keeps no domain")
    return {intent: d for d in chosen for intent in by_domain[d]}


def _read_banking_csv(path: Path) -> list[tuple[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or not {"text", "category"} <= set(reader.fieldnames):
            raise DatasetError(f"{path}: expected a header with columns text,category")
        return [(row["text"], row["category"]) for row in reader]


def prepare_banking77(src: Path, out: Path, seed: int = 0, dev_share: float = BANKING77_DEV_SHARE) -> PrepareReport:
    """BANKING77: a seeded `dev_share` of each intent's train utterances is dev, the rest the KB;
    test = test.csv. Holding out per intent keeps every intent in both KB and dev."""
    train = _read_banking_csv(_require(src / "train.csv"))
    test = _read_banking_csv(_require(src / "test.csv"))
    by_intent: dict[str, list[str]] = defaultdict(list)
    for text, intent in train:
        by_intent[intent].append(text)
    rng = random.Random(seed)
    kb_pairs: list[tuple[str, str]] = []
    dev: list[dict] = []
    for intent in sorted(by_intent):
        texts = list(by_intent[intent])
        rng.shuffle(texts)
        n_dev = max(1, round(len(texts) * dev_share))
        dev += [{"query": t, "faq_id": intent} for t in texts[:n_dev]]
        kb_pairs += [(t, intent) for t in texts[n_dev:]]
    report = PrepareReport("banking77", str(src), str(out))
    kb = intent_kb_rows(kb_pairs, tags=["banking77"])
    report.files["kb.jsonl"] = write_jsonl(out / "kb.jsonl", kb)
    report.files["dev.jsonl"] = write_jsonl(out / "dev.jsonl", dev)
    report.files["test.jsonl"] = write_jsonl(out / "test.jsonl", [{"query": t, "faq_id": i} for t, i in test])
    report.counts["faqs"] = len(by_intent)
    report.notes.append("answers are placeholders '[intent: NAME]': the dataset has no answers")
    report.notes.append(f"no official dev split: dev = a seeded {dev_share:.0%} of train per intent (seed {seed})")
    return report


def _read_tsv_rows(path: Path, encoding: str = "utf-8") -> list[list[str]]:
    # QUOTE_NONE semantics: these files contain unbalanced quotes, so split on tabs only
    with path.open(encoding=encoding, newline="") as fh:
        return [line.rstrip("\r\n").split("\t") for line in fh if line.strip()]


def read_stsb_scores(path: Path) -> list[tuple[float, str, str]]:
    """Raw STS-B rows -> (score, sentence1, sentence2) (training/pairs.py reads them for training too)."""
    from training.pairs import PairFileError
    from training.pairs import read_stsb_scores as read

    try:
        return read(path)
    except PairFileError as exc:
        raise DatasetError(str(exc)) from exc


def _parse_label(value: str, path: Path, line_no: int) -> int:
    if value not in ("0", "1"):
        raise DatasetError(f"{path}:{line_no}: label must be 0 or 1, got {value!r}")
    return int(value)


def prepare_qqp(src: Path, out: Path) -> PrepareReport:
    """QQP (BiMPM partition): `label q1 q2 id` -> pairs_dev.tsv / pairs_test.tsv (+ pairs_train.tsv if present)."""
    report = PrepareReport("qqp", str(src), str(out))
    for split in ("train", "dev", "test"):
        path = src / f"{split}.tsv"
        if not path.is_file():
            if split == "train":
                report.notes.append(
                    "train.tsv is missing from the source (only dev.tsv and test.tsv exist here), "
                    "so no pairs_train.tsv was written"
                )
                continue
            raise DatasetError(f"missing source file {path}")
        pairs = []
        for line_no, cols in enumerate(_read_tsv_rows(path), start=1):
            if len(cols) < 3:
                raise DatasetError(f"{path}:{line_no}: expected label<TAB>q1<TAB>q2, got {len(cols)} columns")
            pairs.append((_parse_label(cols[0], path, line_no), cols[1], cols[2]))
        report.files[f"pairs_{split}.tsv"] = write_pairs_tsv(out / f"pairs_{split}.tsv", pairs)
        report.counts[f"{split}_positive"] = sum(p[0] for p in pairs)
    return report


def prepare_mrpc(src: Path, out: Path) -> PrepareReport:
    """MRPC: msr-para-{train,val,test}.tsv (header, BOM, CRLF) -> pairs_{train,dev,test}.tsv."""
    report = PrepareReport("mrpc", str(src), str(out))
    for split, name in (("train", "msr-para-train.tsv"), ("dev", "msr-para-val.tsv"), ("test", "msr-para-test.tsv")):
        path = _require(src / name)
        rows = _read_tsv_rows(path, encoding="utf-8-sig")
        pairs = []
        for line_no, cols in enumerate(rows[1:], start=2):  # row 1 is the header
            if len(cols) < 5:
                raise DatasetError(f"{path}:{line_no}: expected 5 tab-separated columns, got {len(cols)}")
            pairs.append((_parse_label(cols[0], path, line_no), cols[3], cols[4]))
        report.files[f"pairs_{split}.tsv"] = write_pairs_tsv(out / f"pairs_{split}.tsv", pairs)
        report.counts[f"{split}_positive"] = sum(p[0] for p in pairs)
    report.notes.append("dev = brmson's msr-para-val.tsv (the last 500 pairs of the standard MRPC train)")
    return report


def prepare_stsb(src: Path, out: Path, min_score: float = STSB_PARAPHRASE_MIN_SCORE) -> PrepareReport:
    """STS-B: 0-5 similarity scores binarised at `min_score` -> pairs_{train,dev,test}.tsv."""
    report = PrepareReport("stsb", str(src), str(out))
    for split in ("train", "dev", "test"):
        path = _require(src / f"sts-{split}.csv")
        pairs = [(int(score >= min_score), s1, s2) for score, s1, s2 in read_stsb_scores(path)]
        report.files[f"pairs_{split}.tsv"] = write_pairs_tsv(out / f"pairs_{split}.tsv", pairs)
        report.counts[f"{split}_positive"] = sum(p[0] for p in pairs)
    report.notes.append(f"labels binarised: score >= {min_score} -> 1 (paraphrase), else 0")
    return report


def prepare(
    name: str, src: str | Path, out: str | Path, seed: int = 0,
    domains: Sequence[str] | None = None, exclude_domains: Sequence[str] | None = None,
) -> PrepareReport:
    """Convert dataset `name` found in folder `src` into the exchange files in `out`."""
    src, out = Path(src), Path(out)
    if name not in DATASETS:
        raise DatasetError(f"dataset must be one of {', '.join(DATASETS)}, got {name!r}")
    if not src.is_dir():
        raise DatasetError(f"--src {src} is not a folder")
    if (domains or exclude_domains) and name != "clinc150":
        raise DatasetError("--domains / --exclude-domains apply to clinc150 only")
    if name == "clinc150":
        report = prepare_clinc150(src, out, domains=domains, exclude_domains=exclude_domains)
    elif name == "banking77":
        report = prepare_banking77(src, out, seed=seed)
    elif name == "qqp":
        report = prepare_qqp(src, out)
    elif name == "mrpc":
        report = prepare_mrpc(src, out)
    else:
        report = prepare_stsb(src, out)
    meta = report.to_dict() | {"seed": seed}
    if domains or exclude_domains:
        meta |= {"domains": list(domains or []), "exclude_domains": list(exclude_domains or [])}
    _atomic_write(out / "dataset.json", lambda fh: fh.write(json.dumps(meta, indent=2) + "\n"))
    return report
