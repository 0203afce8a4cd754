"""Training of the Siamese short-text matcher (`faq train siamese`, models/matchers/siamese.py).

Data: labelled pairs files (`label<TAB>q1<TAB>q2`, as `faq data prepare qqp|mrpc` writes them), any number of
`--pairs`, and/or a KB (`--kb`): every epoch, for each phrasing, a positive with another phrasing of its FAQ,
a random negative and a hard negative (one of the 5 nearest phrasings of other FAQs under a sentence encoder,
`--negatives-encoder`; training/pairs.py `KbPairSampler`), drawn afresh. The dev pairs pick the epoch (lowest
dev log loss, patience in epochs) and, at the end, fit the calibration p = sigmoid(a * logit + b) on the best
model's dev logits: a `--dev` pairs file, or `--dev-queries` (labelled user queries against the KB, paired
the way a re-ranking stage sees them: `query_pairs`).

Adam, log loss, mini-batches drawn afresh each epoch. After every epoch (the loop of training/loop.py) the best
model so far is saved as the model folder in `out`, `checkpoint.pt` (weights, optimiser, epoch, history, RNG)
so `--resume` continues a cut run, and `train.json` records the run; a re-run without --resume starts over.
`--max-minutes` stops between batches and keeps the best.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from kb.records import kb_groups
from kb.files import read_kb, read_queries
from models.calibration import Calibration
from models.matchers.siamese import SiameseConfig, SiameseMatcher, SiameseScorer, load_siamese, log_loss
from training.loop import CHECKPOINT_FILE, TrainError, Trainer, config_overrides

log = logging.getLogger(__name__)
REPORT_FILE = "train.json"


@dataclass
class TrainConfig:
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    #: epochs without a better dev log loss before stopping
    patience: int = 4
    seed: int = 0
    max_minutes: float | None = None
    threads: int | None = None

    def validate(self) -> None:
        if self.epochs < 1 or self.batch_size < 2 or self.patience < 1:
            raise TrainError("epochs and patience must be >= 1, batch_size >= 2 (BatchNorm needs two rows)")
        if not self.lr > 0:
            raise TrainError(f"lr must be > 0, got {self.lr}")


def read_pairs(paths: Sequence[str | Path]) -> tuple[list[tuple[str, str]], np.ndarray]:
    from training.pairs import read_pair_file

    pairs: list[tuple[str, str]] = []
    labels: list[int] = []
    for path in paths:
        for p in read_pair_file(path):
            pairs.append((p.q1, p.q2))
            labels.append(p.label)
    if not pairs:
        raise TrainError(f"no pairs in {', '.join(map(str, paths))}")
    return pairs, np.array(labels, dtype=np.int64)


def query_pairs(queries: Sequence[tuple[str, str | None]], groups: Mapping[str, Sequence[str]],
                encode: Any, negatives: int = 3) -> tuple[list[tuple[str, str]], np.ndarray]:
    """Labelled queries (text, gold faq_id or None when no FAQ answers it) -> pairs as a re-ranking stage
    sees them: the query against the best-matching phrasing (encoder cosine) of its gold FAQ (label 1) and
    of each of the `negatives` best other FAQs (label 0)."""
    unknown = sorted({g for _, g in queries if g is not None and g not in groups})
    if unknown:
        raise TrainError(f"dev queries name FAQs the KB lacks: {', '.join(unknown[:5])}"
                         + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))
    faq_ids = list(groups)
    texts = [q for f in faq_ids for q in groups[f]]
    owner = np.array([i for i, f in enumerate(faq_ids) for _ in groups[f]])
    kb_vecs = np.asarray(encode(texts), dtype=np.float32)
    q_vecs = np.asarray(encode([q for q, _ in queries]), dtype=np.float32)
    pairs: list[tuple[str, str]] = []
    labels: list[int] = []
    row_of = {f: i for i, f in enumerate(faq_ids)}
    for (query, gold), sims in zip(queries, q_vecs @ kb_vecs.T):
        best_row: dict[int, int] = {}  # FAQ -> its best phrasing's row, in order of that phrasing's cosine
        for row in np.argsort(-sims):
            best_row.setdefault(int(owner[row]), int(row))
        g = row_of[gold] if gold is not None else None
        if g is not None:
            pairs.append((query, texts[best_row[g]]))
            labels.append(1)
        for f in [f for f in best_row if f != g][:negatives]:
            pairs.append((query, texts[best_row[f]]))
            labels.append(0)
    return pairs, np.array(labels, dtype=np.int64)


def dev_log_loss(scorer: SiameseScorer, pairs: Sequence[tuple[str, str]], labels: np.ndarray) -> float:
    """Log loss of the uncalibrated sigmoid(logit): what training minimises."""
    logits = torch.from_numpy(scorer.raw_scores(pairs).astype(np.float32))
    return float(log_loss(logits, torch.from_numpy(labels)))


class SiameseTrainer(Trainer):
    """One run on the shared loop, the lowest dev log loss the best; `run()` returns the summary written to
    train.json."""

    report_file = REPORT_FILE
    higher_is_better = False

    def __init__(self, config: SiameseConfig, words: Any, train: tuple[list, np.ndarray],
                 dev: tuple[list, np.ndarray], out_dir: str | Path, cfg: TrainConfig, sampler: Any = None,
                 device: str | None = None, states: dict | None = None, resume: bool = False,
                 cache_dir: str | Path | None = None):
        self.config, self.words, self.device_arg, self.states = config, words, device, states
        self.cache_dir = cache_dir
        self.train_pairs, self.train_labels = train
        # KB pairs (training/pairs.py KbPairSampler), drawn afresh every epoch on top of the fixed pairs
        self.sampler = sampler
        self.dev_pairs, self.dev_labels = dev
        self.calibration: Calibration | None = None
        super().__init__(out_dir, cfg, resume=resume)

    def build(self, checkpoint: dict | None) -> None:
        sampler = self.sampler
        kb_positives = sampler is not None and any(len(m) > 1 for m in sampler.members)
        labels = set(self.train_labels.tolist()) | ({0, 1} if kb_positives else {0} if sampler is not None else set())
        if len(labels) < 2:
            raise TrainError("training pairs must hold both labels (a KB gives positives only from FAQs with "
                             "two or more phrasings)")
        self.scorer = SiameseScorer(SiameseMatcher(self.config), self.words, device=self.device_arg, states=self.states)
        self.optimizer = torch.optim.Adam(self.scorer.model.parameters(), lr=self.cfg.lr)
        self.rng = random.Random(self.cfg.seed)
        if checkpoint is not None:
            if checkpoint["model_config"] != dataclasses.asdict(self.scorer.config):
                raise TrainError(f"{self.out / self.checkpoint_file}: saved with another model config: "
                                 f"{checkpoint['model_config']}")
            self.scorer.model.load_state_dict(checkpoint["model"])

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.rng.setstate(checkpoint["sampler_rng"])
        super().restore(checkpoint)

    def checkpoint_state(self) -> dict:
        return {"model": self.scorer.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "sampler_rng": self.rng.getstate(), "model_config": dataclasses.asdict(self.scorer.config)}

    def train_epoch(self) -> dict:
        model = self.scorer.model
        model.train()
        pairs, labels = self.train_pairs, self.train_labels
        if self.sampler is not None:
            drawn = self.sampler.sample(self.rng)
            pairs = pairs + [(p.q1, p.q2) for p in drawn]
            labels = np.concatenate([labels, np.array([p.label for p in drawn], dtype=np.int64)])
        order = list(range(len(pairs)))
        self.rng.shuffle(order)
        total, n = 0.0, 0
        bs = self.cfg.batch_size
        batches = (order[start:start + bs] for start in range(0, len(order), bs))
        for idx in self.in_time(idx for idx in batches if len(idx) >= 2):  # BatchNorm cannot normalise one row
            logits = self.scorer.logits([pairs[i] for i in idx])
            loss = log_loss(logits, torch.from_numpy(labels[idx]).to(logits.device))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            total += loss.item() * len(idx)
            n += len(idx)
        return {"train_log_loss": total / max(n, 1), "pairs": n, "cut": self.partial}

    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        return "dev_log_loss", dev_log_loss(self.scorer, self.dev_pairs, self.dev_labels)

    def save_best(self) -> None:
        self.scorer.calibration = Calibration()
        self.scorer.save(self.out)

    def epoch_row(self, stats: Mapping[str, Any], improved: bool, eval_s: float, epoch_s: float) -> dict:
        return {**stats, "epoch": self.epoch, "dev_log_loss": self.metric, "seconds": round(self.clock.elapsed(), 1)}

    def progress_line(self, row: Mapping[str, Any]) -> str:
        return f"epoch {self.epoch}: train {row['train_log_loss']:.4f} dev {self.metric:.4f} ({row['seconds']:.0f} s)"

    def stop_message(self, kind: str) -> str:
        return {"trained": "epochs", "budget": "max_minutes"}.get(kind, kind)

    def calibrate(self, best: SiameseScorer) -> Calibration:
        from models.scoring import fit_platt

        raw = best.raw_scores(self.dev_pairs)
        a, b = fit_platt(raw.astype(np.float64), self.dev_labels.astype(np.float64))
        return Calibration(a=a, b=b, fitted_on="dev pairs (those that chose the epoch)", n_pairs=len(raw))

    def summary(self) -> dict:
        history = self.history
        return {"model": str(self.out), "config": dataclasses.asdict(self.scorer.config),
                "train": dataclasses.asdict(self.cfg), "train_pairs": len(self.train_pairs),
                "kb_phrasings": len(self.sampler.questions) if self.sampler is not None else 0,
                "dev_pairs": len(self.dev_pairs), "best_dev_log_loss": self.best_metric,
                "best_epoch": 1 + min(range(len(history)), key=lambda i: history[i]["dev_log_loss"]) if history else 0,
                "stopped": self.stop_reason,
                "calibration": dataclasses.asdict(self.calibration) if self.calibration is not None else None,
                "parameters": self.scorer.model.num_parameters(), "history": history}

    def finish(self) -> dict:
        best = load_siamese(self.out, device=str(self.scorer.device), words=self.scorer.words, cache_dir=self.cache_dir)
        best.word_cache = self.scorer.word_cache  # the same texts: MiniLM states are the slow part of a run
        best.calibration = self.calibration = self.calibrate(best)
        best.save(self.out)
        return self.write_report()


def train_siamese(out_dir: str | Path, pairs: Sequence[str | Path] = (), dev: str | Path | None = None,
                  config: SiameseConfig | None = None, cfg: TrainConfig | None = None, resume: bool = False,
                  words: Any = None, device: str | None = None, *, kb: str | Path | None = None,
                  dev_queries: str | Path | None = None, negatives_encoder: Any = None,
                  states: dict | None = None, cache_dir: str | Path | None = None) -> dict:
    """Train on `pairs` files and/or `kb`'s phrasings, pick the epoch and calibrate on `dev` pairs or on
    `dev_queries` against `kb`; the model folder is `out_dir`. `negatives_encoder` (anything with
    `encode(texts) -> L2-normalised vectors`; default all-MiniLM-L6-v2) finds the KB's hard negatives and the
    dev queries' candidates. `states`: a dict of word vectors by text shared between runs over the same
    texts (several encoders trained in a row compute MiniLM's states once). `device` (None: the CPU for the
    model, CUDA when present for the default negatives encoder) and `cache_dir` (the model cache: mpnet and
    the ONNX exports; None: var/models) go to every model this loads."""
    from models.encoders.words import make_words
    from training.pairs import KbPairSampler, encoder_neighbours

    config = config or SiameseConfig()
    cfg = cfg or TrainConfig()
    if not pairs and kb is None:
        raise TrainError("nothing to train on: give pairs files and/or a KB")
    if (dev is None) == (dev_queries is None):
        raise TrainError("give exactly one of dev (a pairs file) and dev_queries (labelled queries, with a KB)")
    if dev_queries is not None and kb is None:
        raise TrainError("dev_queries are paired with a KB's phrasings: give the KB too")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    train = read_pairs(pairs) if pairs else ([], np.zeros(0, dtype=np.int64))
    sampler = None
    if kb is not None:
        groups = kb_groups(read_kb(kb))
        if len(groups) < 2:
            raise TrainError(f"{kb}: a KB needs at least 2 FAQs to give negative pairs")
        if negatives_encoder is None:
            from models.encoders.load import load_encoder

            negatives_encoder = load_encoder("minilm", device=device, cache_dir=cache_dir)
        encode = lambda texts: negatives_encoder.encode(list(texts), batch_size=128)  # noqa: E731
        sampler = KbPairSampler(groups, positives=1, random_negatives=1, hard_negatives=1, hard_pool=5)
        sampler.set_neighbours(encoder_neighbours(encode, k=50))
        if dev_queries is not None:
            labelled = [(q.query, q.faq_id) for q in read_queries(dev_queries)]
            dev_data = query_pairs(labelled, groups, encode)
    if dev is not None:
        dev_data = read_pairs([dev])
    if len(set(dev_data[1].tolist())) < 2:
        raise TrainError("the dev pairs must hold both labels")
    if words is None:
        words = make_words(config.word_repr, device=device or "cpu", cache_dir=cache_dir)
    # a run without a checkpoint to resume starts over
    resume = resume and (Path(out_dir) / CHECKPOINT_FILE).exists()
    return SiameseTrainer(config, words, train, dev_data, out_dir, cfg, sampler=sampler, device=device,
                          states=states, resume=resume, cache_dir=cache_dir).run()


def parse_overrides(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """`--config '{"filters": 128}'` (a JSON object or file) -> SiameseConfig fields, naming unknown ones."""
    return config_overrides(value, SiameseConfig)
