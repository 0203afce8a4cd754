"""`faq train query-encoder`: a fast query encoder fitted into the accurate encoder's space.

The teacher (the encoder that builds the index, all-mpnet-base-v2) and the base (all-MiniLM-L6-v2) both
encode a corpus of question-like sentences once; their vectors are cached in chunks under `--work`
(`teacher-<id>/`, `base-<id>/`: one `.npy` per chunk of 2,048 sentences plus the texts' sha256), so an
interrupted run resumes at the chunk it was writing and a re-run with more sentences encodes only the new
chunks. The projection is then the ridge least-squares fit of teacher vectors from base vectors (with a
bias), in closed form: seconds on a CPU once the vectors exist. 5 % of the sentences are held out and
report how close the mapped vectors come to the teacher's (mean cosine, and how often a held-out
sentence's nearest held-out neighbour is the teacher's).

The corpus (`corpus_sentences`): question-like text from ../shared/data: QQP dev questions, MRPC train,
STS-B train, CLINC150 train + val, BANKING77 train, WikiQA train questions and answer sentences, TrecQA
train questions, plus any KB files
given (their phrasings and answers). Test splits are never read: CLINC150/BANKING77/QQP/MRPC/STS-B/WikiQA/
TrecQA tests are what the evaluations report.
"""
from __future__ import annotations

import csv
import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from training.loop import TrainError

log = logging.getLogger(__name__)

CHUNK = 2048
HELD_OUT = 0.05


# ------------------------------------------------------------------------------------------------
# corpus


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
    from kb.records import is_placeholder, read_kb

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


# ------------------------------------------------------------------------------------------------
# vectors, cached in chunks


def _sha(texts: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


def cached_vectors(encoder: Any, texts: Sequence[str], folder: Path, *, chunk: int = CHUNK,
                   progress: Callable[[str], None] = log.info) -> np.ndarray:
    """`encoder.encode(texts)` (n, dim) float32, computed chunk by chunk into `folder` and read back: a
    chunk whose file exists for the same texts is not encoded again (resume, or a larger corpus)."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    n_chunks = (len(texts) + chunk - 1) // chunk
    t0 = time.perf_counter()
    done = 0
    for i in range(n_chunks):
        block = list(texts[i * chunk:(i + 1) * chunk])
        key = _sha(block)[:16]
        path = folder / f"{key}.npy"
        if path.exists():
            parts.append(np.load(path))
            continue
        vecs = np.asarray(encoder.encode(block, batch_size=64), dtype=np.float32)
        tmp = folder / f"{key}.tmp.npy"
        np.save(tmp, vecs)
        tmp.replace(path)
        parts.append(vecs)
        done += len(block)
        rate = done / max(time.perf_counter() - t0, 1e-9)
        progress(f"{folder.name}: chunk {i + 1}/{n_chunks} ({rate:.0f} sentences/s, "
                 f"{(len(texts) - (i + 1) * chunk) / rate / 60:.1f} min left)" if rate else "")
    return np.concatenate(parts) if parts else np.zeros((0, getattr(encoder, "dim", 0)), np.float32)


# ------------------------------------------------------------------------------------------------
# the fit


def fit_projection(base: np.ndarray, teacher: np.ndarray, ridge: float) -> tuple[np.ndarray, np.ndarray]:
    """argmin_W,b |base W + b - teacher|^2 + ridge |W|^2 -> W (d_base, d), b (d,)."""
    mb, mt = base.mean(axis=0), teacher.mean(axis=0)
    x, y = (base - mb).astype(np.float64), (teacher - mt).astype(np.float64)
    gram = x.T @ x + ridge * np.eye(x.shape[1])
    weight = np.linalg.solve(gram, x.T @ y)  # (d_base, d)
    bias = mt - mb @ weight
    return weight.astype(np.float32), bias.astype(np.float32)


def agreement(mapped: np.ndarray, teacher: np.ndarray, sample: int = 4000, seed: int = 0) -> dict:
    """How close mapped vectors are to the teacher's: mean cosine, and the share of sentences whose nearest
    other sentence (among `sample`) is the same under both."""
    from models.encoders.base import l2_normalise

    q, t = l2_normalise(mapped), l2_normalise(teacher)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(q), size=min(sample, len(q)), replace=False)
    qs, ts = q[idx], t[idx]
    cross = qs @ ts.T  # student query against teacher "FAQs": the asymmetric use
    np.fill_diagonal(cross, -np.inf)
    own = ts @ ts.T
    np.fill_diagonal(own, -np.inf)
    return {"mean_cosine": float(np.mean(np.sum(q * t, axis=1))),
            "nearest_agreement": float(np.mean(cross.argmax(axis=1) == own.argmax(axis=1))), "n": int(len(idx))}


@dataclass
class QueryEncoderConfig:
    teacher: str = "mpnet"
    base: str = "minilm"
    ridge: float = 1.0
    seed: int = 0

    def validate(self) -> None:
        if self.ridge < 0:
            raise TrainError(f"ridge must be >= 0, got {self.ridge}")
        if self.base == self.teacher:
            raise TrainError("base and teacher are the same encoder: nothing to map")


def train_query_encoder(out: str | Path, *, data_dir: str | Path | None, kb_files: Sequence[str | Path] = (),
                        work: str | Path, config: QueryEncoderConfig | None = None, runtime: str = "auto",
                        device: str | None = None, cache_dir: str | Path | None = None,
                        threads: int | None = None) -> dict:
    """Corpus -> cached teacher and base vectors -> ridge projection -> the folder in `out` (+ `training.json`)."""
    from models.encoders.load import load_encoder
    from models.encoders.query import save_query_encoder

    cfg = config or QueryEncoderConfig()
    cfg.validate()
    texts, counts = corpus_sentences(data_dir, kb_files)
    if len(texts) < 100:
        raise TrainError(f"only {len(texts)} sentences: give --data (../shared/data) and/or --kb files")
    log.info("corpus: %d sentences (%s)", len(texts), ", ".join(f"{k} {v}" for k, v in counts.items()))
    t0 = time.perf_counter()
    teacher = load_encoder(cfg.teacher, device=device, runtime=runtime, threads=threads, cache_dir=cache_dir)
    base = load_encoder(cfg.base, device=device, runtime=runtime, threads=threads, cache_dir=cache_dir)
    work = Path(work)
    tv = cached_vectors(teacher, texts, work / f"teacher-{_slug(teacher.id)}-{teacher.runtime}")
    bv = cached_vectors(base, texts, work / f"base-{_slug(base.id)}-{base.runtime}")
    encode_s = time.perf_counter() - t0
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(texts))
    n_held = max(1, int(len(texts) * HELD_OUT))
    held, train = order[:n_held], order[n_held:]
    weight, bias = fit_projection(bv[train], tv[train], cfg.ridge)
    report = {
        "config": asdict(cfg), "sentences": len(texts), "sources": counts, "held_out": int(n_held),
        "teacher_id": teacher.id, "base_id": base.id, "runtime": {"teacher": teacher.runtime, "base": base.runtime},
        "held_out_mapped": agreement(bv[held] @ weight + bias, tv[held], seed=cfg.seed),
        "held_out_base_as_is": {"nearest_agreement": _base_agreement(bv[held], tv[held], cfg.seed)},
        "encode_s": round(encode_s, 1),
    }
    save_query_encoder(out, weight, bias, base=cfg.base, teacher=teacher.id,
                       fit={"method": "ridge", "ridge": cfg.ridge, "sentences": int(len(train)),
                            "held_out_mean_cosine": report["held_out_mapped"]["mean_cosine"]})
    (Path(out) / "training.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    log.info("held out: mean cosine to the teacher %.3f, nearest-neighbour agreement %.3f (base as it is: %.3f)",
             report["held_out_mapped"]["mean_cosine"], report["held_out_mapped"]["nearest_agreement"],
             report["held_out_base_as_is"]["nearest_agreement"])
    return report


def _base_agreement(base: np.ndarray, teacher: np.ndarray, seed: int) -> float:
    """The same nearest-neighbour agreement for the base in its own space (what the fast mode gets)."""
    from models.encoders.base import l2_normalise

    b, t = l2_normalise(base), l2_normalise(teacher)
    idx = np.random.default_rng(seed).choice(len(b), size=min(4000, len(b)), replace=False)
    bb, tt = b[idx] @ b[idx].T, t[idx] @ t[idx].T
    np.fill_diagonal(bb, -np.inf)
    np.fill_diagonal(tt, -np.inf)
    return float(np.mean(bb.argmax(axis=1) == tt.argmax(axis=1)))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]
