"""MMAICM training (`faq train mmaicm`): the pairwise hinge loss (10) over (question, a+, a-) triples.

Data, as ranked lists (`QaList`: one question, its candidates, 0/1 labels):
- answer-selection sets (`--data wikiqa|trecqa --src DIR`): the train split's lists; the dev split's
  lists (the evaluation's filter: at least one correct answer, and for TrecQA one wrong answer too)
  select the epoch by dev MAP and fit the calibration;
- a KB (`--kb FILE`): each phrasing's list holds its FAQ's answer (positive); a seeded 10% of the
  phrasings of FAQs with 2+ phrasings is held out as dev, each against its answer and up to 19 other
  FAQs' answers. Phrasings of one FAQ also form (phrasing, sibling phrasing) lists, because a
  re-ranking stage scores the query against a FAQ's best phrasing as well as its answer.

Triples, drawn afresh each epoch (seeded by seed and epoch): for each positive, `negatives` negatives,
each a wrong candidate of the same list (the hard ones: the test ranks exactly those) or, with
probability `random_negative_share` or when the list has none, a candidate of another question's list
of the same kind (never one of the same FAQ). Adam, batches of `batch_size` triples.

After every epoch (the loop of training/loop.py): dev MAP, the best epoch saved as a model folder in --out
(models/matchers/mmaicm.py), and `checkpoint.pt` (weights, optimiser, epoch, history, RNG state) so
`--resume` continues a cut run.
At the end the best weights get their logistic calibration p = sigmoid(a * score + b), fitted on the
dev pairs (the training pairs when there is no dev), and `training.json` records the run.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from models.calibration import Calibration
from models.encoders.words import make_words
from models.matchers.mmaicm import MMAICM, MmaicmConfig, MmaicmScorer, WEIGHTS_FILE, hinge_loss
from training.loop import TrainError, Trainer, config_overrides

log = logging.getLogger(__name__)

DATASETS = ("wikiqa", "trecqa")
#: dataset -> split -> file name inside the dataset folder
SPLIT_FILES = {
    "wikiqa": {"train": "WikiQA-train.txt", "dev": "WikiQA-dev.txt", "test": "WikiQA-test.txt"},
    "trecqa": {"train": "train.csv", "dev": "dev.csv", "test": "test.csv"},
}
#: KB dev lists: the held-out phrasing's answer among this many other FAQs' answers
KB_DEV_DISTRACTORS = 19


# ------------------------------------------------------------------------------------------------
# data


@dataclass
class QaList:
    """One question and its ranked candidates (label 1 = a correct answer)."""

    question: str
    candidates: list[str]
    labels: list[int]
    #: lists of one group never give each other random negatives (the phrasings of one FAQ)
    group: str | None = None
    #: "answer" or "phrasing": random negatives come from lists of the same kind
    kind: str = "answer"

    @property
    def n_positive(self) -> int:
        return sum(1 for y in self.labels if y)

    @property
    def n_negative(self) -> int:
        return len(self.labels) - self.n_positive


def _grouped(rows: Sequence[tuple[str, str, int]]) -> list[QaList]:
    """Consecutive rows with the same question -> one list (both files are grouped so; a question text
    that comes back later is another question)."""
    lists: list[QaList] = []
    for question, candidate, label in rows:
        if not lists or lists[-1].question != question:
            lists.append(QaList(question, [], []))
        lists[-1].candidates.append(candidate)
        lists[-1].labels.append(label)
    return lists


def _label(value: str, where: str) -> int:
    value = value.strip()
    if value not in ("0", "1"):
        raise TrainError(f"{where}: label must be 0 or 1, got {value!r}")
    return int(value)


def read_wikiqa(path: str | Path) -> list[QaList]:
    """WikiQA-*.txt: `question<TAB>sentence<TAB>label` lines, no header."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                raise TrainError(f"{path}:{n}: expected question<TAB>sentence<TAB>label, got {len(parts)} fields")
            rows.append((parts[0].strip(), parts[1].strip(), _label(parts[2], f"{path}:{n}")))
    return _grouped(rows)


def read_trecqa(path: str | Path) -> list[QaList]:
    """TrecQA *.csv: a `qtext,label,atext` header, standard CSV quoting."""
    rows = []
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"qtext", "label", "atext"} - set(reader.fieldnames or [])
        if missing:
            raise TrainError(f"{path}: missing columns {sorted(missing)} (expected a qtext,label,atext header)")
        for n, row in enumerate(reader, start=2):
            rows.append((row["qtext"].strip(), row["atext"].strip(), _label(row["label"] or "", f"{path}:{n}")))
    return _grouped(rows)


def load_split(data: str, src: str | Path, split: str) -> list[QaList]:
    """The `split` (train, dev, test) of a dataset folder, all lists as they are in the file."""
    if data not in SPLIT_FILES:
        raise TrainError(f"unknown dataset {data!r}: expected one of {', '.join(DATASETS)}")
    path = Path(src) / SPLIT_FILES[data][split]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (--src must be the {data} folder with {SPLIT_FILES[data][split]})")
    return read_wikiqa(path) if data == "wikiqa" else read_trecqa(path)


def evaluable(lists: Sequence[QaList], data: str) -> list[QaList]:
    """The standard protocol's questions: at least one correct answer (WikiQA's "filtered" setting); for
    TrecQA also at least one wrong one (the "clean" setting)."""
    need_negative = data == "trecqa"
    return [l for l in lists if l.n_positive > 0 and (l.n_negative > 0 or not need_negative)]


def average_precision(scores: Sequence[float] | np.ndarray, labels: Sequence[int]) -> float:
    """AP of one ranked list: the mean, over the correct candidates, of the precision at their rank.
    Ties keep the file order (a stable sort). 0 for a list without a correct candidate."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    y = np.asarray(labels, dtype=np.float64)[order]
    if y.sum() == 0:
        return 0.0
    hits = np.cumsum(y)
    ranks = np.arange(1, len(y) + 1)
    return float(np.sum((hits / ranks) * y) / y.sum())


def kb_lists(path: str | Path, seed: int = 0, dev_share: float = 0.1,
             phrasing_pairs: bool = True) -> tuple[list[QaList], list[QaList]]:
    """A KB file -> (train lists, dev lists); see the module docstring."""
    from kb.records import group_records
    from kb.files import read_kb

    records = read_kb(path)
    specs, problems = group_records([(str(i), r) for i, r in enumerate(records)])
    if problems:
        raise TrainError(f"{path}: {problems[0][1]}")
    rng = random.Random(seed)
    answers = {f: s.answer for f, s in specs.items()}
    train: list[QaList] = []
    dev: list[QaList] = []
    faq_ids = list(specs)
    for faq_id, spec in specs.items():
        phrasings = list(spec.questions)
        held: list[str] = []
        if len(phrasings) >= 2:
            k = min(len(phrasings) - 1, max(0, round(dev_share * len(phrasings))))
            if k == 0 and rng.random() < dev_share * len(phrasings):
                k = 1
            held = rng.sample(phrasings, k)
        kept = [p for p in phrasings if p not in held]
        for p in kept:
            train.append(QaList(p, [spec.answer], [1], group=faq_id, kind="answer"))
            siblings = [s for s in kept if s != p]
            if phrasing_pairs and siblings:
                train.append(QaList(p, siblings, [1] * len(siblings), group=faq_id, kind="phrasing"))
        others = [f for f in faq_ids if f != faq_id]
        for p in held:
            distractors = rng.sample(others, min(KB_DEV_DISTRACTORS, len(others)))
            dev.append(QaList(p, [spec.answer] + [answers[f] for f in distractors],
                              [1] + [0] * len(distractors), group=faq_id))
    if not train:
        raise TrainError(f"{path}: no FAQ phrasings to train on")
    if len(specs) < 2:
        raise TrainError(f"{path}: needs at least 2 FAQs (the negatives are other FAQs' answers)")
    return train, dev


@dataclass
class TrainData:
    train: list[QaList]
    dev: list[QaList]
    sources: dict[str, Any] = field(default_factory=dict)

    @property
    def describe(self) -> dict[str, Any]:
        return {
            "train_lists": len(self.train),
            "train_positives": sum(l.n_positive for l in self.train),
            "train_candidates": sum(len(l.candidates) for l in self.train),
            "dev_lists": len(self.dev),
            "dev_pairs": sum(len(l.candidates) for l in self.dev),
            **self.sources,
        }


def prepare_data(data: str | None = None, src: str | Path | None = None, kb: str | Path | None = None,
                 seed: int = 0) -> TrainData:
    """Training and dev lists from an answer-selection set and/or a KB."""
    train: list[QaList] = []
    dev: list[QaList] = []
    sources: dict[str, Any] = {}
    if data is not None:
        if src is None:
            raise TrainError(f"--data {data} needs --src (the {data} folder)")
        lists = load_split(data, src, "train")
        # every list with a correct answer teaches; one without any teaches nothing about ranking
        train += [QaList(l.question, l.candidates, l.labels, group=f"{data}:{i}") for i, l in enumerate(lists)
                  if l.n_positive > 0]
        dev += evaluable(load_split(data, src, "dev"), data)
        sources.update(data=data, src=str(src))
    if kb is not None:
        kb_train, kb_dev = kb_lists(kb, seed=seed)
        train += kb_train
        dev += kb_dev
        sources["kb"] = str(kb)
    if not train:
        raise TrainError("no training data: give --data/--src and/or --kb")
    return TrainData(train, dev, sources)


class TripleSampler:
    """(question, a+, a-) triples for one epoch; see the module docstring."""

    def __init__(self, lists: Sequence[QaList], negatives: int = 4, random_share: float = 0.2):
        self.lists = list(lists)
        self.negatives = negatives
        self.random_share = random_share
        # (list index, candidate) of every list, by kind: where random negatives come from
        self.pool: dict[str, list[tuple[int, str]]] = {}
        for i, l in enumerate(self.lists):
            self.pool.setdefault(l.kind, []).extend((i, c) for c in l.candidates)

    def _random_negative(self, i: int, rng: random.Random, positives: set[str]) -> str | None:
        pool = self.pool[self.lists[i].kind]
        group = self.lists[i].group
        for _ in range(50):
            j, text = pool[rng.randrange(len(pool))]
            other = self.lists[j]
            if j != i and (group is None or other.group != group) and text not in positives:
                return text
        return None

    def sample(self, rng: random.Random) -> list[tuple[str, str, str]]:
        triples = []
        for i, l in enumerate(self.lists):
            positives = {c for c, y in zip(l.candidates, l.labels) if y}
            wrong = [c for c, y in zip(l.candidates, l.labels) if not y and c not in positives]
            for pos in (c for c, y in zip(l.candidates, l.labels) if y):
                for _ in range(self.negatives):
                    if wrong and rng.random() >= self.random_share:
                        neg = wrong[rng.randrange(len(wrong))]
                    else:
                        neg = self._random_negative(i, rng, positives)
                    if neg is not None:
                        triples.append((l.question, pos, neg))
        rng.shuffle(triples)
        return triples


# ------------------------------------------------------------------------------------------------
# training


@dataclass
class TrainConfig:
    epochs: int = 30
    batch_size: int = 64  # triples per step
    lr: float = 1e-3  # Adam (the paper names back-propagation, not the optimiser or rate)
    negatives: int = 4  # negatives per positive per epoch
    random_negative_share: float = 0.2
    patience: int = 5  # epochs without a better dev MAP before stopping
    seed: int = 0
    max_minutes: float | None = None  # wall-clock budget for the whole run; the running epoch is cut short
    grad_clip: float = 5.0
    eval_batch_size: int = 256

    def validate(self) -> None:
        for name in ("epochs", "batch_size", "negatives", "patience", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise TrainError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise TrainError(f"lr must be > 0, got {self.lr}")
        if not 0.0 <= self.random_negative_share <= 1.0:
            raise TrainError(f"random_negative_share must be in [0, 1], got {self.random_negative_share}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise TrainError(f"max_minutes must be > 0, got {self.max_minutes}")


def parse_config_overrides(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """--config: a JSON object or a JSON file -> MmaicmConfig overrides (unknown fields named)."""
    return config_overrides(value, MmaicmConfig)


def pairs_of(lists: Sequence[QaList]) -> tuple[list[tuple[str, str]], np.ndarray]:
    pairs = [(l.question, c) for l in lists for c in l.candidates]
    labels = np.array([y for l in lists for y in l.labels], dtype=np.int64)
    return pairs, labels


def mean_average_precision(lists: Sequence[QaList], scores: np.ndarray) -> float:
    aps, start = [], 0
    for l in lists:
        aps.append(average_precision(scores[start:start + len(l.candidates)], l.labels))
        start += len(l.candidates)
    return float(np.mean(aps)) if aps else 0.0


class MmaicmTrainer(Trainer):
    """One MMAICM run on the shared loop; `run()` returns the summary written to training.json."""

    def __init__(self, data: TrainData, out_dir: str | Path, cfg: TrainConfig,
                 config_overrides: Mapping[str, Any] | None = None, resume: bool = False,
                 device: str | None = None, command: str | None = None, cache_dir: str | Path | None = None):
        self.data = data
        self.overrides = dict(config_overrides or {})
        self.device_arg, self.cache_dir = device, cache_dir
        super().__init__(out_dir, cfg, resume=resume, command=command)

    def build(self, checkpoint: dict | None) -> None:
        if checkpoint is not None:
            config = MmaicmConfig(**checkpoint["model_config"])
            changed = sorted(k for k, v in self.overrides.items()
                             if getattr(config, k) != (tuple(v) if k == "kernels" else v))
            if changed:
                raise TrainError(f"--resume continues the checkpoint's model: {', '.join(changed)} differ from it")
        else:
            try:
                config = MmaicmConfig(**self.overrides)
            except (TypeError, ValueError) as exc:
                raise TrainError(str(exc)) from exc
        model = MMAICM(config)
        if checkpoint is not None:
            model.load_state_dict(checkpoint["model"])
        device = self.device_arg
        words = make_words(config.word_repr, device=device or "cpu", cache_dir=self.cache_dir)
        self.scorer = MmaicmScorer(model, words, name=self.out.resolve().name, cache_size=None, device=device)
        self.model = self.scorer.model
        self.optimizer = torch.optim.Adam([p for p in self.model.parameters() if p.requires_grad], lr=self.cfg.lr)
        self.sampler = TripleSampler(self.data.train, self.cfg.negatives, self.cfg.random_negative_share)

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        super().restore(checkpoint)

    def checkpoint_state(self) -> dict:
        return {"model": self.model.state_dict(), "model_config": dataclasses.asdict(self.model.config),
                "optimizer": self.optimizer.state_dict()}

    # ---- helpers --------------------------------------------------------------------------------------
    def fill_cache(self) -> float:
        """Word vectors of every training and dev text, once (MiniLM's states are most of the cost)."""
        t0 = time.perf_counter()
        cfg = self.model.config
        lists = self.data.train + self.data.dev
        self.scorer.fill_cache([l.question for l in lists], cfg.max_q_len, progress=True)
        self.scorer.fill_cache([c for l in lists for c in l.candidates], cfg.max_a_len, progress=True)
        return time.perf_counter() - t0

    def dev_metric(self) -> tuple[str, float]:
        if not self.data.dev:
            return "train_loss", float("nan")
        pairs, _ = pairs_of(self.data.dev)
        scores = self.scorer.score_pairs(pairs, batch_size=self.cfg.eval_batch_size)
        return "dev_map", mean_average_precision(self.data.dev, scores)

    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        name, value = self.dev_metric()
        return (name, -stats["loss"]) if name == "train_loss" else (name, value)

    # ---- the loop's hooks -----------------------------------------------------------------------------
    def prepare(self) -> None:
        log.info("training MMAICM (%s, %s, attention %s, %d parameters) on %s: %s", self.model.config.word_repr,
                 self.model.config.matcher, self.model.config.use_attention, self.model.num_parameters(),
                 self.scorer.device, json.dumps(self.data.describe))
        self.cache_s = self.fill_cache()
        log.info("word vectors of %d texts in %.1fs", len(self.scorer.word_cache), self.cache_s)

    def train_epoch(self) -> dict:
        triples = self.sampler.sample(random.Random(self.cfg.seed * 1_000_003 + self.epoch))
        return self.fit(triples)

    def fit(self, triples: list[tuple[str, str, str]]) -> dict:
        cfg, model, mc = self.cfg, self.model, self.model.config
        model.train()
        total, n_done, n_violated = 0.0, 0, 0
        t0 = time.perf_counter()
        bar = self.progress(len(triples), "triple")
        try:
            for batch in self.in_time(triples[start:start + cfg.batch_size]
                                      for start in range(0, len(triples), cfg.batch_size)):
                n = len(batch)
                q, q_mask = self.scorer.inputs([t[0] for t in batch], mc.max_q_len)
                a, a_mask = self.scorer.inputs([t[1] for t in batch] + [t[2] for t in batch], mc.max_a_len)
                scores = model(torch.cat([q, q]), torch.cat([q_mask, q_mask]), a, a_mask)
                loss = hinge_loss(scores[:n], scores[n:], mc.margin)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                self.optimizer.step()
                total += float(loss.detach()) * n
                n_violated += int((scores[:n] <= scores[n:]).sum())
                n_done += n
                bar.update(n)
                bar.set_postfix(loss=f"{total / n_done:.4f}", refresh=False)
        finally:
            bar.close()
        seconds = time.perf_counter() - t0
        return {"loss": total / max(n_done, 1), "misordered": n_violated / max(n_done, 1), "triples": n_done,
                "train_s": round(seconds, 2), "triples_per_s": round(n_done / max(seconds, 1e-9), 1),
                "partial": self.partial}

    def save_best(self) -> None:
        self.scorer.save(self.out)

    def epoch_row(self, stats: Mapping[str, Any], improved: bool, eval_s: float, epoch_s: float) -> dict:
        return {"epoch": self.epoch, "metric_name": self.metric_name, "metric": round(self.metric, 6), "best": improved,
                "eval_s": round(eval_s, 2), "epoch_s": round(epoch_s, 2),
                **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in stats.items()}}

    def progress_line(self, row: Mapping[str, Any]) -> str:
        return (f"epoch {self.epoch}: loss {row['loss']:.4f}, misordered {row['misordered']:.3f}, {self.metric_name} "
                f"{self.metric:.4f}{' *best*' if row['best'] else ''} | {row['triples']} triples, "
                f"{row['triples_per_s']:.0f}/s")

    def calibrate(self) -> Calibration:
        """Platt scaling of the best model's raw scores on the dev pairs (else the training lists' pairs)."""
        from models.scoring import fit_platt

        from safetensors.torch import load_file

        self.model.load_state_dict(load_file(str(self.out / WEIGHTS_FILE), device=str(self.scorer.device)))
        lists, source = (self.data.dev, "dev") if self.data.dev else (self.data.train, "train")
        pairs, labels = pairs_of(lists)
        if labels.min() == labels.max():  # one class only (a KB of answers alone): add random negatives
            extra = self.sampler.sample(random.Random(self.cfg.seed))[: len(pairs)]
            pairs += [(q, neg) for q, _, neg in extra]
            labels = np.concatenate([labels, np.zeros(len(extra), dtype=np.int64)])
        raw = self.scorer.score_pairs(pairs, batch_size=self.cfg.eval_batch_size)
        a, b = fit_platt(raw, labels, prior=(4.0, 0.0))
        calibration = Calibration(a=a, b=b, fitted_on=source, n_pairs=len(pairs),
                                  fusion_weight=self.scorer.calibration.fusion_weight)
        self.scorer.calibration = calibration
        self.scorer.save_calibration(self.out)
        return calibration

    def summary(self) -> dict:
        return {
            "command": self.command,
            "data": self.data.describe,
            "model_config": dataclasses.asdict(self.model.config),
            "parameters": self.model.num_parameters(),
            "train_config": dataclasses.asdict(self.cfg),
            "device": str(self.scorer.device),
            "torch_threads": torch.get_num_threads(),
            "epochs_done": self.epoch,
            "best_epoch": self.best_epoch,
            "best_metric": None if self.best_metric == -math.inf else self.best_metric,
            "metric": self.history[-1]["metric_name"] if self.history else None,
            "stop_reason": self.stop_reason,
            "history": self.history,
        }

    def finish(self) -> dict:
        if not (self.out / WEIGHTS_FILE).exists():  # nothing trained (budget spent on the word vectors)
            self.scorer.save(self.out)
        calibration = self.calibrate()
        summary = self.write_report({"calibration": dataclasses.asdict(calibration),
                                     "word_vectors_s": round(self.cache_s, 1), "wall_s": round(self.clock.elapsed(), 1)})
        log.info("done (%s): best %s %.4f at epoch %d; calibration a=%.3f b=%.3f on %s -> %s", self.stop_reason,
                 summary["metric"], self.best_metric, self.best_epoch, calibration.a, calibration.b,
                 calibration.fitted_on, self.out)
        return summary


def train_mmaicm(out_dir: str | Path, data: str | None = None, src: str | Path | None = None,
                 kb: str | Path | None = None, config_overrides: str | Mapping[str, Any] | None = None,
                 train_config: TrainConfig | None = None, resume: bool = False, device: str | None = None,
                 command: str | None = None, cache_dir: str | Path | None = None) -> dict:
    """Train (or `resume`) an MMAICM into `out_dir`; returns the training summary. `device` (None: the CPU)
    and `cache_dir` (the model cache; None: var/models) go to the word representation's load."""
    cfg = train_config or TrainConfig()
    overrides = parse_config_overrides(config_overrides)
    prepared = prepare_data(data, src, kb, seed=cfg.seed)
    return MmaicmTrainer(prepared, out_dir, cfg, overrides, resume=resume, device=device, command=command,
                         cache_dir=cache_dir).run()

