"""What an MSEM run trains and measures on: its config (`TrainConfig`) and the KB, pair and dev files
read, checked and split into `TrainData` (deterministic for a seed)."""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kb.records import kb_groups
from kb.files import read_kb
from training.loop import TrainError
from training.pairs import IntentClasses, Bm25Neighbours, Pair, build_intent_classes, split_pairs


@dataclass
class TrainConfig:
    epochs: int = 20
    batch_size: int = 200  # paper
    lr: float = 4e-4  # paper: Adam
    sgd_lr: float = 1e-3  # paper: SGD after the dev metric stalls
    patience_switch: int = 1  # ours: stalled epochs before Adam -> SGD
    patience: int = 2  # ours: stalled epochs after the switch before stopping early
    seed: int = 0
    max_minutes: float | None = None  # wall-clock budget; the epoch in progress ends early
    positives: int = 1  # per KB question per epoch
    random_negatives: int = 1
    hard_negatives: int = 1
    hard_pool: int = 5  # hard negative drawn from this many nearest other-FAQ questions
    hard_k: int = 20  # neighbours kept per question when mining
    hard_refresh_every: int = 1  # epochs between re-mining hard negatives with the current model
    holdout: float = 0.1  # share held out for the pair-accuracy dev metric (when no --dev)
    grad_clip: float = 5.0  # ours: global norm clip, keeps the GRU stable under SGD
    eval_batch_size: int = 512
    min_delta: float = 1e-4  # an improvement smaller than this counts as no improvement
    minilm_lr_scale: float = 0.1  # ours: learning-rate factor of MiniLM's trainable top layers
    lr_decay: float = 1.0  # ours: Adam epoch e (0-based) runs at lr * lr_decay**e (1 = the paper's constant rate)

    def validate(self) -> None:
        for name in ("epochs", "batch_size", "patience_switch", "patience", "hard_pool", "hard_k",
                     "hard_refresh_every", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise TrainError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("lr", "sgd_lr", "lr_decay"):
            if not getattr(self, name) > 0:
                raise TrainError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise TrainError(f"max_minutes must be > 0, got {self.max_minutes}")
        if not 0.0 <= self.holdout < 1.0:
            raise TrainError(f"holdout must be in [0, 1), got {self.holdout}")


@dataclass
class TrainData:
    """Everything the loop trains and evaluates on (built once, deterministic for a seed)."""

    groups: dict[str, list[str]]  # faq_id -> training questions (KB minus held-out anchors)
    file_pairs: list[Pair]  # labelled training pairs from --pairs
    dev_queries: list[tuple[str, str | None]] | None  # (query, faq_id) when --dev
    dev_pairs: list[Pair] | None  # held-out pairs when no --dev
    classes: IntentClasses
    #: --dev-kb: (question, faq_id) the dev queries are matched against instead of the training KB; FAQs
    #: the model never trained on, so the dev metric measures how it generalises to a new FAQ
    dev_kb: list[tuple[str, str]] | None = None
    describe: dict = field(default_factory=dict)
    #: KB questions held out of training (no --dev): (question, faq_id), measured for information, never deciding
    held_out: list[tuple[str, str]] = field(default_factory=list)


def prepare_data(
    records: Sequence[Any],
    pairs: Sequence[Pair],
    dev_queries: Sequence[Any] | None,
    cfg: TrainConfig,
    dev_kb: Sequence[Any] | None = None,
) -> TrainData:
    """KB records (faq_id, question), labelled pairs, optional dev queries and the optional KB they are
    matched against (default: the training KB) -> TrainData."""
    groups = kb_groups(records)
    if not groups and not pairs:
        raise TrainError("nothing to train on: the KB is empty and no --pairs were given")
    if groups and len(groups) < 2:
        raise TrainError("the KB needs at least 2 FAQs (negatives come from other FAQs)")
    dev_pairs: list[Pair] | None = None
    file_pairs = list(pairs)
    held_out: list[tuple[str, str]] = []
    if dev_queries is None and cfg.holdout > 0:
        if file_pairs:
            file_pairs, dev_pairs = split_pairs(file_pairs, cfg.holdout, cfg.seed)
        else:
            groups, dev_pairs, held_out = _hold_out_kb_pairs(groups, cfg.holdout, cfg.seed)
    held_out_questions = len(held_out)
    classes = build_intent_classes(groups, file_pairs)
    dq = [(q.query, q.faq_id) for q in dev_queries] if dev_queries is not None else None
    if dq is not None and not any(f is not None for _, f in dq):
        raise TrainError("--dev has no in-scope queries (every faq_id is null): nothing to measure")
    describe = {
        "faqs": len(groups),
        "kb_questions": sum(len(q) for q in groups.values()),
        "file_pairs": len(file_pairs),
        "file_pairs_positive": sum(p.label for p in file_pairs),
        "dev_queries": len(dq) if dq is not None else 0,
        "dev_in_scope": sum(f is not None for _, f in dq) if dq is not None else 0,
        "dev_pairs": len(dev_pairs) if dev_pairs is not None else 0,
        "kb_questions_held_out": held_out_questions,
        "intent_classes": classes.n_classes,
        "intent_other_questions": classes.sizes()[0] if classes.n_classes else 0,
    }
    dkb = [(r.question, r.faq_id) for r in dev_kb] if dev_kb is not None else None
    if dkb is not None:
        describe |= {"dev_kb_faqs": len({f for _, f in dkb}), "dev_kb_questions": len(dkb)}
    return TrainData(groups, file_pairs, dq, dev_pairs, classes, dev_kb=dkb, describe=describe, held_out=held_out)


def _hold_out_kb_pairs(
    groups: dict[str, list[str]], share: float, seed: int
) -> tuple[dict[str, list[str]], list[Pair], list[tuple[str, str]]]:
    """Hold out a seeded `share` of questions of FAQs with >= 3 variants (each keeps >= 2) and build
    dev pairs anchored on them: one positive, one random and one lexically hard negative each."""
    rng = random.Random(seed + 7919)
    kept: dict[str, list[str]] = {}
    held: list[tuple[str, str]] = []  # (question, faq_id)
    for faq_id, qs in groups.items():
        qs = list(qs)
        # at least one per FAQ that can spare it: a KB with 3-5 phrasings per FAQ would otherwise
        # hold out nothing at 10% and leave the model (and the base comparison) unmeasured
        n_hold = min(len(qs) - 2, max(1, round(len(qs) * share))) if len(qs) >= 3 else 0
        picked = set(rng.sample(range(len(qs)), n_hold)) if n_hold > 0 else set()
        held += [(qs[i], faq_id) for i in sorted(picked)]
        kept[faq_id] = [q for i, q in enumerate(qs) if i not in picked]
    if not held:
        return kept, [], []
    all_questions = [q for qs in kept.values() for q in qs]
    faq_of = [f for f, qs in kept.items() for _ in qs]
    # lexical neighbours of each held-out question among the kept ones
    index = Bm25Neighbours(all_questions + [q for q, _ in held])
    nearest = index.nearest(10)
    pairs: list[Pair] = []
    for h, (question, faq_id) in enumerate(held):
        pairs.append(Pair(question, rng.choice(kept[faq_id]), 1))
        other = _random_other(faq_of, faq_id, rng)
        pairs.append(Pair(question, all_questions[other], 0))
        hard = [int(j) for j in nearest[len(all_questions) + h] if j < len(all_questions) and faq_of[j] != faq_id]
        pairs.append(Pair(question, all_questions[hard[0] if hard else _random_other(faq_of, faq_id, rng)], 0))
    return kept, pairs, held


def _random_other(faq_of: Sequence[str], faq_id: str, rng: random.Random) -> int:
    """A random index whose FAQ differs from `faq_id` (the KB has >= 2 FAQs)."""
    while True:
        i = rng.randrange(len(faq_of))
        if faq_of[i] != faq_id:
            return i


def read_dev_queries(dev_path: str | Path, records: Sequence[Any], where: str = "the KB") -> list[Any]:
    """Read the --dev queries and check them against the KB `records` they are matched against: a
    missing file, an unreadable one or a faq_id the KB lacks raises TrainError naming the file (before any
    training; `faq quickstart --dev` checks with this too)."""
    from kb.records import KbValidationError
    from kb.files import read_queries

    if not Path(dev_path).is_file():
        raise TrainError(f"--dev {dev_path}: no such file (labelled user queries, JSONL {{query, faq_id}})")
    try:
        dev = read_queries(dev_path)
    except KbValidationError as exc:
        raise TrainError(f"--dev {dev_path}: {exc.errors[0]}"
                         + (f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else "")) from exc
    if not any(q.faq_id is not None for q in dev):
        raise TrainError(f"--dev {dev_path}: no in-scope queries (every faq_id is null): nothing to measure")
    faq_ids = {r.faq_id for r in records}
    unknown = sorted({q.faq_id for q in dev if q.faq_id is not None and q.faq_id not in faq_ids})
    if unknown:
        raise TrainError(f"--dev {dev_path}: {len(unknown)} faq_id(s) not in {where}, e.g. {unknown[:5]}")
    return dev


def as_list(value: str | Path | Sequence[str | Path] | None) -> list[str | Path]:
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [value]
    return list(value)


def read_kbs(paths: Sequence[str | Path]) -> list[Any]:
    """Several KB files train together: with more than one, each file's faq_ids get its folder name as a
    prefix (`clinc150/book_flight`) so that FAQs of different files never merge."""
    if len(paths) <= 1:
        return read_kb(paths[0]) if paths else []
    prefixes = [Path(p).resolve().parent.name or f"kb{i}" for i, p in enumerate(paths)]
    if len(set(prefixes)) < len(prefixes):
        prefixes = [f"{pre}{i}" for i, pre in enumerate(prefixes)]
    return [
        dataclasses.replace(r, faq_id=f"{pre}/{r.faq_id}")
        for pre, path in zip(prefixes, paths) for r in read_kb(path)
    ]
