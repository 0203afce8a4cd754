"""Training of the analogy model and its BiGRU-cosine baseline (`faq train analogy`, models/matchers/analogy.py).

Data (`--qa wikiqa:DIR | trecqa:DIR | kb:FILE`, ranked lists as training/mmaicm.py reads them):
- answer-selection sets: the train split's who / when / where questions with a correct answer train, the
  dev split's (the same filter: the paper's Table 2 subsets) select the epoch;
- a KB: kb_lists' (phrasing, FAQ answer) lists; a phrasing without a wh-word type gets the type "any", so
  a KB of how-to questions trains one type.

Prototypes: k per type (`--prototypes`), (question, one correct answer) pairs of the train split, drawn
once with the seed and saved with the model; the same prototypes build the training quadruples and
score at test time (4.1). Quadruples are drawn afresh each epoch (models/matchers/analogy.py QuadrupleSampler).

Adam 1e-3 with weight decay 0.01 (paper, coupled L2 as "L2-regularized loss" says); after every epoch (the
loop of training/loop.py) the dev MAP, the best epoch saved as the model folder in --out, and
`checkpoint.pt` (weights, optimiser, epoch, history, RNG) so `--resume` continues a cut run; a re-run
without --resume starts over.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from models.matchers.analogy import (
    AnalogyConfig,
    AnalogyScorer,
    BiGruEncoder,
    Prototype,
    QuadrupleSampler,
    analogy_energy,
    contrastive_loss,
    list_type,
    load_analogy,
    select_prototypes,
)
from models.calibration import Calibration
from models.encoders.words import make_words
from training.loop import TrainError, Trainer
from training.mmaicm import QaList, kb_lists, load_split, mean_average_precision

log = logging.getLogger(__name__)

SOURCES = ("wikiqa", "trecqa", "kb")


def parse_qa(spec: str) -> tuple[str, str]:
    """"wikiqa:DIR" | "trecqa:DIR" | "kb:FILE" -> (kind, path)."""
    kind, sep, path = spec.partition(":")
    if not sep or kind not in SOURCES or not path:
        raise TrainError(f"--qa must be wikiqa:DIR, trecqa:DIR or kb:FILE, got {spec!r}")
    return kind, path


def typed(lists: Sequence[QaList]) -> list[QaList]:
    """The paper's subsets: who / when / where questions (models/matchers/analogy.py question_type) with at least
    one correct answer."""
    return [l for l in lists if list_type(l) is not None and l.n_positive > 0]


@dataclass
class AnalogyData:
    train: list[QaList]
    dev: list[QaList]
    sources: dict[str, Any] = field(default_factory=dict)

    @property
    def describe(self) -> dict[str, Any]:
        by_type: dict[str, int] = {}
        for l in self.train:
            by_type[list_type(l)] = by_type.get(list_type(l), 0) + 1
        return {"train_questions": len(self.train), "train_by_type": by_type, "dev_questions": len(self.dev),
                "train_positives": sum(l.n_positive for l in self.train), **self.sources}


def prepare_data(qa: str, seed: int = 0) -> AnalogyData:
    kind, path = parse_qa(qa)
    if kind == "kb":
        train, dev = kb_lists(path, seed=seed, phrasing_pairs=False)
        for l in train + dev:
            l.qtype = list_type(l) or "any"  # type: ignore[attr-defined]
        data = AnalogyData([l for l in train if l.n_positive > 0], [l for l in dev if l.n_positive > 0])
    else:
        data = AnalogyData(typed(load_split(kind, path, "train")), typed(load_split(kind, path, "dev")))
    data.sources = {"qa": qa}
    if not data.train:
        raise TrainError(f"{qa}: no who / when / where question with a correct answer to train on")
    return data


@dataclass
class TrainConfig:
    prototypes: int = 30  # k per type (paper: 30)
    epochs: int = 30
    batch_size: int = 64  # quadruples per step
    lr: float = 1e-3  # paper
    weight_decay: float = 0.01  # paper
    per_answer: int = 8  # ours: prototypes per correct answer and epoch (each with a positive and a negative)
    patience: int = 5
    seed: int = 0
    max_minutes: float | None = None
    grad_clip: float = 5.0

    def validate(self) -> None:
        for name in ("prototypes", "epochs", "batch_size", "per_answer", "patience"):
            if getattr(self, name) < 1:
                raise TrainError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise TrainError("lr must be > 0 and weight_decay >= 0")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise TrainError(f"max_minutes must be > 0, got {self.max_minutes}")


class AnalogyTrainer(Trainer):
    """One run on the shared loop; `run()` returns the summary written to training.json."""

    def __init__(self, data: AnalogyData, out_dir: str | Path, cfg: TrainConfig,
                 config: AnalogyConfig | None = None, resume: bool = False, device: str | None = None,
                 command: str | None = None, words: Any = None, cache_dir: str | Path | None = None):
        self.data, self.config, self.words, self.device_arg = data, config, words, device
        self.cache_dir = cache_dir
        super().__init__(out_dir, cfg, resume=resume, command=command)

    def build(self, checkpoint: dict | None) -> None:
        config, data, cfg = self.config, self.data, self.cfg
        if checkpoint is not None:
            saved = AnalogyConfig(**checkpoint["model_config"])
            if config is not None and config != saved:
                changed = sorted(k for k in AnalogyConfig.field_names() if getattr(config, k) != getattr(saved, k))
                raise TrainError(f"--resume continues the checkpoint's model: {', '.join(changed)} differ from it")
            config = saved
            prototypes = [Prototype(**p) for p in checkpoint["prototypes"]]
        else:
            config = config or AnalogyConfig()
            prototypes = select_prototypes(data.train, cfg.prototypes, seed=cfg.seed,
                                           types=sorted({list_type(l) for l in data.train}))
        encoder = BiGruEncoder(config)
        if checkpoint is not None:
            encoder.load_state_dict(checkpoint["model"])
        words = self.words
        if words is None or words.kind != config.word_repr:
            words = make_words(config.word_repr, device=self.device_arg or "cpu", cache_dir=self.cache_dir)
        self.scorer = AnalogyScorer(encoder, words, prototypes, name=self.out.resolve().name, device=self.device_arg)
        self.model = self.scorer.encoder
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.sampler = QuadrupleSampler(data.train, prototypes, cfg.per_answer, config.objective,
                                        borrow_negatives=str(data.sources.get("qa", "")).startswith("kb:"))

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        super().restore(checkpoint)

    def checkpoint_state(self) -> dict:
        return {"model": self.model.state_dict(), "model_config": dataclasses.asdict(self.model.config),
                "prototypes": [dataclasses.asdict(p) for p in self.scorer.prototypes],
                "optimizer": self.optimizer.state_dict()}

    def fill_cache(self) -> float:
        t0 = time.perf_counter()
        texts = sorted({l.question for l in self.data.train + self.data.dev}
                       | {c for l in self.data.train + self.data.dev for c in l.candidates})
        from tqdm import tqdm

        for start in tqdm(range(0, len(texts), 128), desc=f"word vectors ({self.scorer.words.kind})",
                          file=sys.stderr, leave=False, mininterval=1.0):
            self.scorer.inputs(texts[start:start + 128])
        return time.perf_counter() - t0

    def dev_map(self) -> float:
        return mean_average_precision(self.data.dev, np.concatenate(self.scorer.score_lists(self.data.dev)))

    def step(self, batch: Sequence[tuple[str, str, str, str, int]]) -> tuple[float, int]:
        """One optimiser step on quadruples -> (loss, how many are on the wrong side of E = m / 2 + 1 / 2)."""
        texts = sorted({t for quad in batch for t in quad[:4] if t})
        row = {t: i for i, t in enumerate(texts)}
        vectors = self.model(*self.scorer.inputs(texts))  # (n_texts, D)
        q = vectors[[row[x[2]] for x in batch]]
        a = vectors[[row[x[3]] for x in batch]]
        if self.model.config.objective == "cosine":
            energy = torch.nn.functional.cosine_similarity(q, a, dim=-1)
        else:
            energy = analogy_energy(vectors[[row[x[0]] for x in batch]], vectors[[row[x[1]] for x in batch]], q, a)
        labels = torch.tensor([x[4] for x in batch], device=energy.device)
        loss = contrastive_loss(energy, labels, self.model.config.margin)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        threshold = (1.0 + self.model.config.margin) / 2
        wrong = int(((energy > threshold) != labels.bool()).sum())
        return float(loss.detach()), wrong

    # ---- the loop's hooks -----------------------------------------------------------------------------
    def prepare(self) -> None:
        mc = self.model.config
        log.info("training the %s model (%s words, margin %g, %d parameters, %d prototypes): %s", mc.objective,
                 mc.word_repr, mc.margin, self.model.num_parameters(), len(self.scorer.prototypes),
                 json.dumps(self.data.describe))
        self.cache_s = self.fill_cache()
        if self.epoch == 0 and self.data.dev:
            # epoch 0 (untrained) is a candidate too: a run that never beats it saves it
            self.best_metric = self.dev_map()
            self.scorer.save(self.out)
            self.history.append({"epoch": 0, "dev_map": round(self.best_metric, 6), "best": True})
            log.info("epoch 0: dev MAP %.4f", self.best_metric)

    def train_epoch(self) -> dict:
        quads = self.sampler.sample(random.Random(self.cfg.seed * 1_000_003 + self.epoch))
        self.model.train()
        total, done, wrong = 0.0, 0, 0
        t0 = time.perf_counter()
        bar = self.progress(len(quads), "quad")
        try:
            for batch in self.in_time(quads[start:start + self.cfg.batch_size]
                                      for start in range(0, len(quads), self.cfg.batch_size)):
                loss, w = self.step(batch)
                total += loss * len(batch)
                wrong += w
                done += len(batch)
                bar.update(len(batch))
                bar.set_postfix(loss=f"{total / done:.4f}", refresh=False)
        finally:
            bar.close()
        seconds = time.perf_counter() - t0
        return {"loss": total / max(done, 1), "wrong_side": wrong / max(done, 1), "quadruples": done,
                "train_s": round(seconds, 2), "partial": self.partial}

    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        return ("dev_map", self.dev_map()) if self.data.dev else ("neg_loss", -stats["loss"])

    def save_best(self) -> None:
        self.scorer.save(self.out)

    def epoch_row(self, stats: Mapping[str, Any], improved: bool, eval_s: float, epoch_s: float) -> dict:
        return {"epoch": self.epoch, self.metric_name: round(self.metric, 6), "best": improved, **stats}

    def progress_line(self, row: Mapping[str, Any]) -> str:
        return (f"epoch {self.epoch}: loss {row['loss']:.4f}, wrong side {row['wrong_side']:.3f}, dev MAP "
                f"{self.metric:.4f}{' *best*' if row['best'] else ''} ({row['quadruples']} quadruples, "
                f"{row['train_s']:.0f}s)")

    def stop_message(self, kind: str) -> str:
        if kind in ("trained", "epochs"):
            return f"reached {self.cfg.epochs} epochs"
        if kind == "patience":
            return f"early stop: dev MAP did not improve for {self.cfg.patience} epochs"
        return super().stop_message(kind)

    def calibrate(self) -> Calibration:
        """Platt scaling of the saved (best) model's scores on the dev lists (else the training lists'),
        so a re-ranking stage can pool it as a probability. A list without a wrong candidate (a KB's) gets
        up to 5 other lists' answers as wrong ones."""
        from models.scoring import fit_platt

        best = load_analogy(self.out, words=self.scorer.words, device=str(self.scorer.device))
        lists, source = (self.data.dev, "dev") if self.data.dev else (self.data.train, "train")
        rng = random.Random(self.cfg.seed)
        answers = [c for l in lists for c, y in zip(l.candidates, l.labels) if y]
        raw: list[float] = []
        labels: list[int] = []
        for l in lists:
            candidates, ys = list(l.candidates), list(l.labels)
            if all(ys):
                others = [a for a in answers if a not in candidates]
                extra = rng.sample(others, min(5, len(others)))
                candidates, ys = candidates + extra, ys + [0] * len(extra)
            raw.extend(float(v) for v in best.score(l.question, candidates))
            labels.extend(int(y) for y in ys)
        a, b = fit_platt(np.array(raw), np.array(labels), prior=(4.0, 0.0))
        calibration = Calibration(a=a, b=b, fitted_on=source, n_pairs=len(raw))
        best.calibration = calibration
        best.save_calibration(self.out)
        return calibration

    def summary(self) -> dict:
        return {"command": self.command, "data": self.data.describe,
                "model_config": dataclasses.asdict(self.model.config), "parameters": self.model.num_parameters(),
                "prototypes": len(self.scorer.prototypes), "train_config": dataclasses.asdict(self.cfg),
                "torch_threads": torch.get_num_threads(), "epochs_done": self.epoch, "best_epoch": self.best_epoch,
                "best_dev_map": None if self.best_metric == -math.inf else self.best_metric,
                "stop_reason": self.stop_reason, "history": self.history}

    def finish(self) -> dict:
        if not (self.out / "model.safetensors").exists():
            self.scorer.save(self.out)
        calibration = self.calibrate()
        summary = self.write_report({"word_vectors_s": round(self.cache_s, 1), "wall_s": round(self.clock.elapsed(), 1),
                                     "calibration": dataclasses.asdict(calibration)})
        log.info("done (%s): best dev MAP %.4f at epoch %d -> %s", self.stop_reason, self.best_metric,
                 self.best_epoch, self.out)
        return summary


def train_analogy(out_dir: str | Path, qa: str, config: AnalogyConfig | None = None,
                  train_config: TrainConfig | None = None, resume: bool = False, device: str | None = None,
                  command: str | None = None, cache_dir: str | Path | None = None) -> dict:
    """Train (or `resume`) an analogy / BiGRU-cosine model into `out_dir`; returns the training summary.
    `device` (None: the CPU) and `cache_dir` (the model cache; None: var/models) go to the word
    representation's load."""
    cfg = train_config or TrainConfig()
    return AnalogyTrainer(prepare_data(qa, seed=cfg.seed), out_dir, cfg, config, resume=resume, device=device,
                          command=command, cache_dir=cache_dir).run()
