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

`--dev FILE` (a KB's dev queries, in users' words) makes the fine-tuning keep the epoch with the best dev
top-1 instead of the best corpus agreement, and measures the starting point first (training/query_encoder/
dev.py). `--from DIR` refines an existing query encoder on the `--kb` files' phrasings and answers alone
(`refine_query_encoder`): minutes on a CPU, kept only where it beats DIR on the dev queries.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from training.loop import TrainError
from training.query_encoder.corpus import corpus_sentences
from training.query_encoder.dev import pair_dev_files, read_dev_set
from training.query_encoder.pack import pack_lookup, read_pack, write_pack
from training.query_encoder.vectors import agreement, base_agreement, cached_vectors, fit_projection

__all__ = ["QueryEncoderConfig", "agreement", "cached_vectors", "corpus_sentences", "fit_projection",
           "train_query_encoder"]

log = logging.getLogger(__name__)

HELD_OUT = 0.05


@dataclass
class QueryEncoderConfig:
    teacher: str = "mpnet"
    base: str = "minilm"
    ridge: float = 1.0
    seed: int = 0
    # fine-tuning after the fit (train_layers > 0): the base's top layers and the projection
    train_layers: int = 0
    epochs: int = 3
    patience: int = 1
    batch_size: int = 128
    lr: float = 5e-5
    lr_projection: float = 5e-4
    max_len: int = 128
    contrastive: float = 0.1  # weight of the in-batch term: a query against the batch's teacher vectors
    temperature: float = 0.05
    max_minutes: float | None = None
    stop_after_minutes: float | None = None
    epoch_sentences: int | None = None  # an "epoch" of this many sentences: dev is measured that often
    answer_weight: float = 0.6  # how dev queries rank FAQs (the service's FAQ_ANSWER_WEIGHT)
    typos: float = 0.0  # share of training sentences given one user-like slip per draw (target: the clean text's)

    def validate(self) -> None:
        if self.ridge < 0:
            raise TrainError(f"ridge must be >= 0, got {self.ridge}")
        if self.base == self.teacher:
            raise TrainError("base and teacher are the same encoder: nothing to map")
        if not 0 <= self.train_layers <= 6:
            raise TrainError(f"train_layers must be in 0..6 (the base's layers), got {self.train_layers}")
        if self.train_layers and self.base != "minilm":
            raise TrainError("train_layers needs the minilm base")
        for name in ("epochs", "batch_size", "max_len"):
            if getattr(self, name) < 1:
                raise TrainError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.epoch_sentences is not None and self.epoch_sentences < self.batch_size:
            raise TrainError(f"epoch_sentences must be >= batch_size ({self.batch_size}), got {self.epoch_sentences}")
        if not 0 <= self.typos <= 1:
            raise TrainError(f"typos must be in [0, 1], got {self.typos}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise TrainError(f"max_minutes must be > 0, got {self.max_minutes}")


def train_query_encoder(out: str | Path, *, data_dir: str | Path | None, kb_files: Sequence[str | Path] = (),
                        work: str | Path, config: QueryEncoderConfig | None = None, runtime: str = "auto",
                        device: str | None = None, cache_dir: str | Path | None = None,
                        threads: int | None = None, resume: bool = False,
                        dev_files: Sequence[str | Path] = (), init_from: str | Path | None = None,
                        teacher_pack: str | Path | None = None, write_teacher_pack: str | Path | None = None) -> dict:
    """Corpus -> cached teacher and base vectors -> ridge projection -> (with `train_layers`, the base's top
    layers and the projection fine-tuned) -> the folder in `out` (+ `training.json`). With `init_from`: a
    KB refinement of that folder (`refine_query_encoder`). `write_teacher_pack` also saves the corpus and
    the teacher's vectors (the dev KBs' texts included) in one file; `teacher_pack` trains from such a file
    instead of the corpus and never loads the teacher (pack.py)."""
    from models.encoders.load import load_encoder
    from models.encoders.query import save_query_encoder

    cfg = config or QueryEncoderConfig()
    cfg.validate()
    if init_from is not None:
        return refine_query_encoder(out, init_from, kb_files=kb_files, dev_files=dev_files, work=work, config=cfg,
                                    runtime=runtime, device=device, cache_dir=cache_dir, threads=threads,
                                    resume=resume)
    if dev_files and not cfg.train_layers and write_teacher_pack is None:
        raise TrainError("--dev picks the fine-tuning's epoch: give --train-layers N too")
    pairs = pair_dev_files(kb_files, dev_files)
    work = Path(work)
    t0 = time.perf_counter()
    if teacher_pack is not None:
        packed, packed_vectors, meta = read_pack(teacher_pack)
        texts, tv = packed[:meta["n_corpus"]], packed_vectors[:meta["n_corpus"]]
        counts = {f"pack:{Path(teacher_pack).name}": len(texts)}
        teacher_id, teacher_runtime = meta["teacher"], meta["runtime"]
        lookup = pack_lookup(teacher_pack, packed, packed_vectors)
    else:
        texts, counts = corpus_sentences(data_dir, kb_files)
    if len(texts) < 100:
        raise TrainError(f"only {len(texts)} sentences: give --data (../shared/data) and/or --kb files")
    log.info("corpus: %d sentences (%s)", len(texts), ", ".join(f"{k} {v}" for k, v in counts.items()))
    if teacher_pack is None:
        teacher = load_encoder(cfg.teacher, device=device, runtime=runtime, threads=threads, cache_dir=cache_dir)
        teacher_id, teacher_runtime = teacher.id, teacher.runtime
        tv = cached_vectors(teacher, texts, work / f"teacher-{_slug(teacher.id)}-{teacher.runtime}")
        lookup = _known_first(texts, tv, teacher)
        if write_teacher_pack is not None:
            _write_pack(write_teacher_pack, texts, tv, teacher, [read_dev_set(kb, dev) for kb, dev in pairs])
    base = load_encoder(cfg.base, device=device, runtime=runtime, threads=threads, cache_dir=cache_dir)
    bv = cached_vectors(base, texts, work / f"base-{_slug(base.id)}-{base.runtime}")
    encode_s = time.perf_counter() - t0
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(texts))
    n_held = max(1, int(len(texts) * HELD_OUT))
    held, train = order[:n_held], order[n_held:]
    weight, bias = fit_projection(bv[train], tv[train], cfg.ridge)
    report = {
        "config": asdict(cfg), "sentences": len(texts), "sources": counts, "held_out": int(n_held),
        "teacher_id": teacher_id, "base_id": base.id, "runtime": {"teacher": teacher_runtime, "base": base.runtime},
        "held_out_mapped": agreement(bv[held] @ weight + bias, tv[held], seed=cfg.seed),
        "held_out_base_as_is": {"nearest_agreement": base_agreement(bv[held], tv[held], cfg.seed)},
        "encode_s": round(encode_s, 1),
    }
    if not cfg.train_layers:
        save_query_encoder(out, weight, bias, base=cfg.base, teacher=teacher_id,
                           fit={"method": "ridge", "ridge": cfg.ridge, "sentences": int(len(train)),
                                "held_out_mean_cosine": report["held_out_mapped"]["mean_cosine"]})
    else:  # the fit only starts the fine-tuning, whose best epoch is the folder (kept across --resume)
        from training.query_encoder.student import StudentTrainer

        dev_sets = [read_dev_set(kb, dev).attach(lookup) for kb, dev in pairs]
        trainer = StudentTrainer(out, cfg, texts=texts, teacher_vectors=tv, train_idx=train, held_idx=held,
                                 weight=weight, bias=bias, teacher_id=teacher_id, device=device, cache_dir=cache_dir,
                                 resume=resume, dev_sets=dev_sets)
        report["fine_tune"] = trainer.run()
        report["held_out_mapped"] = report["fine_tune"]["held_out"]
    (Path(out) / "ridge.json" if cfg.train_layers else Path(out) / "training.json").write_text(
        json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    log.info("held out: mean cosine to the teacher %.3f, nearest-neighbour agreement %.3f (base as it is: %.3f)",
             report["held_out_mapped"]["mean_cosine"], report["held_out_mapped"]["nearest_agreement"],
             report["held_out_base_as_is"]["nearest_agreement"])
    return report


def refine_query_encoder(out: str | Path, init_from: str | Path, *, kb_files: Sequence[str | Path],
                         dev_files: Sequence[str | Path], work: str | Path, config: QueryEncoderConfig,
                         runtime: str = "auto", device: str | None = None, cache_dir: str | Path | None = None,
                         threads: int | None = None, resume: bool = False) -> dict:
    """`init_from`'s query encoder trained further on the KB's phrasings and answers: each text towards the
    teacher's vector of it, and ranked towards its own FAQ's other texts among the KB's (student.py). The
    folder in `out` is whichever of the start and the refined epochs ranks the dev queries best, so a
    refinement that does not help users' wording is not kept (`refine.json` `fine_tune.kept`)."""
    from safetensors.numpy import load_file

    from kb.records import is_placeholder
    from kb.files import read_kb
    from models.encoders.load import load_encoder
    from models.encoders.query import TOP_LAYERS_FILE, WEIGHTS_FILE, read_config
    from training.query_encoder.student import StudentTrainer

    start = read_config(init_from)
    if not kb_files:
        raise TrainError("--from refines on a KB: give --kb FILE")
    if not dev_files:
        raise TrainError("--from needs --dev FILE: a refinement is kept only if it ranks the KB's dev queries "
                         "(users' wording) better than the query encoder it starts from")
    pairs = pair_dev_files(kb_files, dev_files)
    cfg = config
    # the cached frozen states must already hold the start's trained layers: train at least those again
    cfg.train_layers = max(cfg.train_layers, int(start.get("train_layers") or 0)) or 3
    teacher = load_encoder(cfg.teacher, device=device, runtime=runtime, threads=threads, cache_dir=cache_dir)
    if start["teacher"] != teacher.id:
        raise TrainError(f"{init_from} was fitted to {start['teacher']}, the teacher here is {teacher.id}")
    texts: list[str] = []
    groups: list[int] = []
    seen: set[str] = set()
    for k, path in enumerate(kb_files):
        faq_row: dict[str, int] = {}
        for r in read_kb(path):
            row = faq_row.setdefault(r.faq_id, len(faq_row))
            for text in (r.question, r.answer if r.answer and not is_placeholder(r.answer) else None):
                text = " ".join(text.split()) if text else ""
                if text and text not in seen:
                    seen.add(text)
                    texts.append(text)
                    groups.append(k * 1_000_000 + row)
    tv = cached_vectors(teacher, texts, Path(work) / f"refine-{_slug(teacher.id)}-{teacher.runtime}")
    dev_sets = [read_dev_set(kb, dev).attach(_known_first(texts, tv, teacher)) for kb, dev in pairs]
    projection = load_file(str(Path(init_from) / WEIGHTS_FILE))
    layers_file = Path(init_from) / TOP_LAYERS_FILE
    init_layers = load_file(str(layers_file)) if layers_file.exists() else None
    log.info("refining %s on %d texts of %d KB file(s); kept only if dev top-1 rises", init_from, len(texts),
             len(kb_files))
    trainer = StudentTrainer(out, cfg, texts=texts, teacher_vectors=tv, train_idx=np.arange(len(texts)),
                             held_idx=np.arange(0), weight=projection["weight"], bias=projection["bias"],
                             teacher_id=teacher.id, device=device, cache_dir=cache_dir, resume=resume,
                             dev_sets=dev_sets, groups=np.asarray(groups), init_layers=init_layers)
    trainer.fit_note = {"method": f"refined on {', '.join(Path(k).name for k in kb_files)}", "from": str(init_from)}
    summary = trainer.run()
    report = {"config": asdict(cfg), "from": str(init_from), "texts": len(texts), "teacher_id": teacher.id,
              "fine_tune": summary}
    (Path(out) / "refine.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return report


def _write_pack(path: str | Path, texts: list[str], tv: np.ndarray, teacher: Any, dev_sets: list) -> None:
    known = set(texts)
    extra = list(dict.fromkeys(t for d in dev_sets for t in d.texts() if t not in known))
    vectors = np.concatenate([tv, teacher.encode(extra)]) if extra else tv
    meta = write_pack(path, texts + extra, vectors, teacher_id=teacher.id, runtime=teacher.runtime,
                      n_corpus=len(texts))
    log.info("teacher pack %s: %d corpus texts + %d dev KB texts, %.1f MB", path, meta["n_corpus"], len(extra),
             Path(path).stat().st_size / 1e6)


def _known_first(texts: Sequence[str], vectors: np.ndarray, teacher: Any) -> Callable[[list[str]], np.ndarray]:
    """Teacher vectors of a batch: the cached ones of `texts` (which hold most of a KB's), the rest encoded."""
    row_of = {t: i for i, t in enumerate(texts)}

    def lookup(batch: list[str]) -> np.ndarray:
        missing = [t for t in batch if t not in row_of]
        fresh = dict(zip(missing, teacher.encode(missing))) if missing else {}
        return np.stack([vectors[row_of[t]] if t in row_of else fresh[t] for t in batch])

    return lookup


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]
