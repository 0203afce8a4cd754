"""MSEM multi-task training (`faq train msem`).

Loss per batch of pairs (q1, q2, y), u = MSEM(q1), v = MSEM(q2):

    L = λ · BCE(σ(γ (cos(u, v) - α)), y) + (1 - λ) · (CE(W u + b, c(q1)) + CE(W v + b, c(q2))) / 2

with the shared intent head W, b over the paraphrase-graph classes (training/pairs.py); with
`use_multitask=False` (or no intent head) only the matching term is used.

Data per epoch (resampled every epoch, training/pairs.py `KbPairSampler`): for every KB question one
positive (another variant of its FAQ), one random negative, one hard negative (a near question of
another FAQ: BM25 neighbours before the model has learned anything, the current model's cosine
neighbours afterwards, refreshed every `hard_refresh_every` epochs), plus the labelled pairs of
`--pairs` (minus a held-out slice when that slice is the dev set).

Schedule (paper): Adam lr 4e-4, batch 200; when the dev metric stops improving (`patience_switch`
epochs), switch once to SGD lr 1e-3 and continue from the current weights; after the switch stop
when it has not improved for `patience` epochs. Dev metric:
- `--dev QUERIES.jsonl`: top-1 accuracy of exact nearest-KB-question retrieval by cosine over the
  in-scope queries (what the service does, minus Annoy's approximation);
- else, with a KB, the same top-1 for a seeded 10% of the KB questions (at least one of every FAQ
  with 3 or more) held out from training, matched against the rest;
- else (pairs only) pair accuracy (ŷ >= 0.5 <=> y = 1) on a held-out slice of `--pairs`.

With a baseline encoder (`faq train msem` defaults to the product's default encoder), the best model
is then compared with that encoder used zero-shot and `selection.json` says which one to serve:
fine-tuning is kept only when it measured better on labelled user queries (`--dev`). Held-out KB
phrasings are written like the KB, not like users, so they never decide: without --dev the base is kept
and their numbers are recorded for information only (see `select_model`).

Output folder: the best model as an MsemEncoder folder (config.json, model.safetensors, vocab),
`training.json` (command, data, configs, per-epoch metrics), `README.md`, and `checkpoint.pt` +
`checkpoint_text/` after every epoch (model, optimiser, scaler, epoch, RNG states, best metric,
schedule state) so `--resume` continues where it stopped. Ctrl-C saves a checkpoint first.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from kb.records import kb_groups
from models.encoders.msem.model import MSEM, TOKEN_BASES, MsemConfig
from models.encoders.msem.encoder import MsemEncoder, init_minilm_layers
from models.scoring import sigmoid
from training.pairs import (
    IntentClasses,
    KbPairSampler,
    Bm25Neighbours,
    Pair,
    build_intent_classes,
    encoder_neighbours,
    lexical_neighbours,
    split_pairs,
)
from models.encoders.words import MiniLMText, load_text
from models.text import TextEncoder, split_compound, tokenize

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_TEXT_DIR = "checkpoint_text"
TRAINING_FILE = "training.json"
#: fields of MsemConfig that shape the weights; `--init` keeps the loaded model's values for them
ARCHITECTURE_FIELDS = {
    "word_dim", "char_dim", "char_filters", "char_kernel", "max_word_len", "hidden", "heads", "max_len",
    "ffn_dim", "pool_heads_r", "pool_da", "highway_layers", "out_dim", "use_aru", "aru_as_mha", "pooling",
    "use_highway", "use_char", "word_repr",
}


class TrainError(ValueError):
    """Bad training input (empty data, unknown config field, incompatible checkpoint)."""


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


# ---------------------------------------------------------------------------------------------
# data


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


# ---------------------------------------------------------------------------------------------
# model setup


def parse_config_overrides(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """--config: a JSON object literal or a path to a JSON file -> dict of MsemConfig fields."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        overrides = dict(value)
    else:
        text = value
        if not value.lstrip().startswith("{"):
            path = Path(value)
            if not path.is_file():
                raise TrainError(f"--config {value!r}: neither a JSON object nor an existing file")
            text = path.read_text(encoding="utf-8")
        try:
            overrides = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TrainError(f"--config: invalid JSON ({exc})") from exc
        if not isinstance(overrides, dict):
            raise TrainError("--config must be a JSON object of MsemConfig fields")
    unknown = sorted(set(overrides) - MsemConfig.field_names())
    if unknown:
        raise TrainError(f"--config: unknown MsemConfig fields {unknown}")
    return overrides


def reconfigure_heads(encoder: MsemEncoder, config_updates: Mapping[str, Any]) -> MsemEncoder:
    """`--init` for the minilm variant: MiniLM's wordpiece vocabulary is fixed, so there is nothing to
    extend; a copy of `encoder` with `config_updates` applied (n_intents: the intent head is re-created)
    and every other weight copied."""
    old_cfg = encoder.model.config
    bad_arch = sorted(k for k, v in config_updates.items() if k in ARCHITECTURE_FIELDS and getattr(old_cfg, k) != v)
    if bad_arch:
        raise TrainError(f"--config cannot change architecture fields of an --init model: {bad_arch}")
    new_cfg = dataclasses.replace(old_cfg, **dict(config_updates))
    if old_cfg.minilm_train_layers and new_cfg.minilm_train_layers != old_cfg.minilm_train_layers:
        raise TrainError(f"--config minilm_train_layers={new_cfg.minilm_train_layers}: the --init model already trains "
                         f"{old_cfg.minilm_train_layers} MiniLM layers (only a model with none can add them)")
    model = MSEM(new_cfg)
    state = {k: v for k, v in encoder.model.state_dict().items() if not k.startswith("intent_head.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or {m for m in missing if not m.startswith("embed.top.")} - {"intent_head.weight", "intent_head.bias"}:
        raise TrainError(f"--init weights do not fit: missing {missing}, unexpected {unexpected}")
    if not old_cfg.minilm_train_layers and new_cfg.minilm_train_layers:
        # MiniLM's own top layers: the model computes exactly what --init computed, then trains them
        init_minilm_layers(model, encoder.text)
    return MsemEncoder(model, encoder.text, device=encoder.device, name=encoder.name)


def extend_vocabulary(
    encoder: MsemEncoder,
    texts: Sequence[str],
    config_updates: Mapping[str, Any],
    glove: Any = None,
    min_count: int = 2,
) -> tuple[MsemEncoder, dict[str, int]]:
    """A copy of `encoder` whose vocabularies also hold the new words/characters of `texts` (GloVe
    words get their GloVe vector, other words seen `min_count` times a random learned one) and
    whose config has `config_updates` applied (n_intents: the intent head is re-created).

    Word ids are rearranged ([<pad>, <unk>, old learned, new learned, old GloVe, new GloVe]) because
    learned ids must precede GloVe ids; the embedding rows move with them, so old words keep their
    vectors. All other weights are copied unchanged.
    """
    from models.glove import load_glove

    glove = glove if glove is not None else load_glove()
    old_text, old_model = encoder.text, encoder.model
    old_cfg = old_model.config
    known = old_text.word_to_id
    glove_index = glove.index
    counts: Counter[str] = Counter()
    char_counts: Counter[str] = Counter()
    for text in texts:
        for token in tokenize(text):
            pieces = [token] if (token in known or token in glove_index) else split_compound(token)
            counts.update(pieces)
            for piece in pieces:
                char_counts.update(piece[: old_text.max_word_len])
    new_words = [w for w, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if w not in known]
    new_learned = [w for w in new_words if w not in glove_index and counts[w] >= min_count]
    new_glove = [w for w in new_words if w in glove_index]
    new_chars = sorted((c for c in char_counts if c not in old_text.char_to_id), key=lambda c: (-char_counts[c], c))

    n_old_learned = old_text.n_learned_words
    old_learned_words = old_text.word_vocab[:n_old_learned]
    old_glove_words = old_text.word_vocab[n_old_learned:]
    word_vocab = [*old_learned_words, *new_learned, *old_glove_words, *new_glove]
    char_vocab = [*old_text.char_vocab, *new_chars]
    text = TextEncoder(word_vocab, char_vocab, n_learned_words=n_old_learned + len(new_learned),
                       max_word_len=old_text.max_word_len)

    with torch.no_grad():
        old_vectors = torch.cat([old_model.embed.word_learned.detach().cpu(),
                                 old_model.embed.word_pretrained.detach().cpu()])
        std = float(old_vectors[n_old_learned:].std()) if len(old_glove_words) > 1 else 0.1
        learned_init = torch.randn(len(new_learned), old_cfg.word_dim) * std
        glove_rows, _ = glove.lookup(new_glove) if new_glove else (np.zeros((0, old_cfg.word_dim), np.float32), None)
        vectors = torch.cat([
            old_vectors[:n_old_learned], learned_init, old_vectors[n_old_learned:],
            torch.from_numpy(np.asarray(glove_rows, dtype=np.float32)),
        ])
    bad_arch = sorted(k for k, v in config_updates.items() if k in ARCHITECTURE_FIELDS and getattr(old_cfg, k) != v)
    if bad_arch:
        raise TrainError(f"--config cannot change architecture fields of an --init model: {bad_arch}")
    cfg = dataclasses.replace(
        old_cfg,
        word_vocab_size=len(word_vocab),
        char_vocab_size=len(char_vocab),
        n_learned_words=text.n_learned_words,
        **dict(config_updates),
    )
    model = MSEM(cfg, vectors)
    state = {k: v for k, v in old_model.state_dict().items()
             if not k.startswith(("embed.word_", "intent_head."))}
    old_chars = state.pop("embed.chars.embed.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed_missing = {"embed.word_learned", "embed.word_pretrained", "embed.chars.embed.weight",
                       "intent_head.weight", "intent_head.bias"}
    if unexpected or set(missing) - allowed_missing:
        raise TrainError(f"--init weights do not fit: missing {sorted(set(missing) - allowed_missing)}, "
                         f"unexpected {unexpected}")
    if old_chars is not None and model.embed.chars is not None:
        with torch.no_grad():
            model.embed.chars.embed.weight[: old_chars.shape[0]] = old_chars
    stats = {"new_learned_words": len(new_learned), "new_glove_words": len(new_glove), "new_chars": len(new_chars)}
    return MsemEncoder(model, text, device=encoder.device, name=encoder.name), stats


# ---------------------------------------------------------------------------------------------
# the loop


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _make_optimizer(kind: str, model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam or SGD over the trainable parameters: MSEM's own, then (`minilm_train_layers`) the base's
    pretrained layers, which `_set_epoch_lr` gives a smaller rate. Rates start at epoch 0's."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    pretrained = ("embed.top.", "embed.rel_bias.")  # the base's layers (and mpnet's position bias)
    groups = [{"params": [p for n, p in named if not n.startswith(pretrained)]}]
    top = [p for n, p in named if n.startswith(pretrained)]
    if top:
        groups.append({"params": top})
    optimizer = torch.optim.Adam(groups, lr=cfg.lr) if kind == "adam" else torch.optim.SGD(groups, lr=cfg.sgd_lr)
    _set_epoch_lr(optimizer, kind, 0, cfg)
    return optimizer


def _set_epoch_lr(optimizer: torch.optim.Optimizer, kind: str, epoch: int, cfg: TrainConfig) -> None:
    """The rate of 0-based `epoch`: Adam decays by `lr_decay` per epoch (set from the config, not the
    checkpoint, so `--resume` can continue a run on a new schedule); SGD keeps `sgd_lr`. MiniLM's layers
    (the second group) learn at `minilm_lr_scale` times the rate, as pretrained transformers are
    fine-tuned gently."""
    lr = cfg.lr * cfg.lr_decay ** epoch if kind == "adam" else cfg.sgd_lr
    for i, group in enumerate(optimizer.param_groups):
        group["lr"] = lr * (cfg.minilm_lr_scale if i else 1.0)


class Trainer:
    """One training run. `run()` returns the summary written to training.json."""

    def __init__(
        self,
        data: TrainData,
        out_dir: str | Path,
        cfg: TrainConfig,
        config_overrides: Mapping[str, Any] | None = None,
        init_dir: str | Path | None = None,
        resume: bool = False,
        device: str | None = None,
        command: str | None = None,
        sources: Mapping[str, Any] | None = None,
        glove: Any = None,
    ):
        cfg.validate()
        self.data, self.cfg = data, cfg
        self.out = Path(out_dir)
        self.overrides = dict(config_overrides or {})
        self.init_dir = str(init_dir) if init_dir else None
        self.command = command or " ".join(shlex.quote(a) for a in sys.argv)
        self.sources = dict(sources or {})
        self.history: list[dict] = []
        self.epoch = 0  # completed epochs
        self.best_metric = -math.inf
        self.best_epoch = 0
        self.bad_epochs = 0
        self.optimizer_kind = "adam"
        self.stop_reason: str | None = None
        self.vocab_stats: dict[str, int] = {}
        self.out.mkdir(parents=True, exist_ok=True)
        _seed_everything(cfg.seed)

        intents = {"n_intents": data.classes.n_classes if data.classes.n_classes > 1 else 0}
        checkpoint = None
        if resume:
            path = self.out / CHECKPOINT_FILE
            if not path.is_file():
                raise TrainError(f"--resume: no checkpoint at {path}")
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
            text = load_text(self.out / CHECKPOINT_TEXT_DIR)
            model = MSEM(MsemConfig(**checkpoint["model_config"]))
            model.load_state_dict(checkpoint["model"])
            if model.config.n_intents != intents["n_intents"]:
                raise TrainError(
                    f"--resume: the checkpoint has {model.config.n_intents} intent classes but the data gives "
                    f"{intents['n_intents']}: resume with the same data and seed"
                )
            self.encoder = MsemEncoder(model, text, device=device, name=self.out.resolve().name)
        elif init_dir:
            base = MsemEncoder.load(init_dir, device=device)
            if base.config.uses_token_states:
                self.encoder = reconfigure_heads(base, {**self.overrides, **intents})
            else:
                self.encoder, self.vocab_stats = extend_vocabulary(
                    base, self._all_texts(), {**self.overrides, **intents}, glove=glove
                )
        else:
            self.encoder = MsemEncoder.create(
                {**self.overrides, **intents}, self._all_texts(), device=device, glove=glove, seed=cfg.seed
            )
        self.model: MSEM = self.encoder.model
        self.device = self.encoder.device
        self.use_amp = str(self.device).startswith("cuda")
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = _make_optimizer("adam", self.model, cfg)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.use_amp)
        if checkpoint is not None:
            self._restore(checkpoint)

        self.sampler = KbPairSampler(
            data.groups, positives=cfg.positives, random_negatives=cfg.random_negatives,
            hard_negatives=cfg.hard_negatives, hard_pool=cfg.hard_pool,
        ) if data.groups else None
        self._tokens: dict[str, list[str]] = {}
        self.kb_questions = [q for qs in data.groups.values() for q in qs]
        self.kb_faq_ids = [f for f, qs in data.groups.items() for _ in qs]
        if isinstance(self.encoder.text, MiniLMText):
            self._fill_minilm_cache()

    def _fill_minilm_cache(self) -> None:
        """minilm variant: MiniLM is frozen, so its token states are computed once per distinct sentence
        (training texts and dev queries) and kept in RAM (fp16) for every epoch, every dev evaluation
        and every hard-negative refresh, instead of re-running the transformer each time."""
        text = self.encoder.text
        assert isinstance(text, MiniLMText)
        texts = self._all_texts()
        if self.data.dev_queries is not None:
            texts += [q for q, _ in self.data.dev_queries]
        texts += [q for q, _ in self.data.dev_kb or []]
        for p in self.data.dev_pairs or []:
            texts += [p.q1, p.q2]
        t0 = time.perf_counter()
        n = text.fill_cache(texts, self.model.config.max_len, batch_size=self.cfg.eval_batch_size)
        log.info("base token states cached for %d sentences in %.1fs (%.1f MB fp16)", n,
                 time.perf_counter() - t0, text.cache_bytes() / 1e6)

    # ---- helpers ----------------------------------------------------------------------------------
    def _all_texts(self) -> list[str]:
        texts = [q for qs in self.data.groups.values() for q in qs]
        for p in self.data.file_pairs:
            texts += [p.q1, p.q2]
        return texts

    def _batch(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """`MSEM.forward` keyword inputs for `texts` (token lists cached per text; the minilm variant reads
        its token-state cache)."""
        max_len = self.model.config.max_len
        if isinstance(self.encoder.text, MiniLMText):
            return self.encoder.text.batch_inputs(texts, None, self.device, max_len=max_len)
        token_lists = []
        for t in texts:
            toks = self._tokens.get(t)
            if toks is None:
                toks = self._tokens[t] = self.encoder.text.tokens(t)[:max_len]
            token_lists.append(toks)
        return self.encoder.text.batch_inputs(texts, token_lists, self.device)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.encode(list(texts), batch_size=self.cfg.eval_batch_size)

    def _restore(self, ck: dict) -> None:
        self.optimizer_kind = ck["optimizer_kind"]
        self.optimizer = _make_optimizer(self.optimizer_kind, self.model, self.cfg)
        self.optimizer.load_state_dict(ck["optimizer"])
        if ck.get("scaler") and self.use_amp:
            self.scaler.load_state_dict(ck["scaler"])
        self.epoch = ck["epoch"]
        self.best_metric = ck["best_metric"]
        self.best_epoch = ck["best_epoch"]
        self.bad_epochs = ck["bad_epochs"]
        self.history = ck["history"]
        self.vocab_stats = ck.get("vocab_stats", {})
        _set_rng_state(ck["rng"])

    def save_checkpoint(self) -> None:
        """checkpoint.pt (+ checkpoint_text/ vocabulary), written atomically."""
        self.encoder.text.save(self.out / CHECKPOINT_TEXT_DIR)
        ck = {
            "model": self.model.state_dict(),
            "model_config": dataclasses.asdict(self.model.config),
            "optimizer": self.optimizer.state_dict(),
            "optimizer_kind": self.optimizer_kind,
            "scaler": self.scaler.state_dict() if self.use_amp else None,
            "epoch": self.epoch,
            "best_metric": self.best_metric,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "history": self.history,
            "vocab_stats": self.vocab_stats,
            "rng": _rng_state(),
            "train_config": dataclasses.asdict(self.cfg),
        }
        tmp = self.out / (CHECKPOINT_FILE + ".tmp")
        torch.save(ck, tmp)
        os.replace(tmp, self.out / CHECKPOINT_FILE)

    # ---- pairs ------------------------------------------------------------------------------------
    def epoch_pairs(self, epoch: int) -> tuple[list[Pair], str]:
        """This epoch's pairs (KB sample + file pairs, shuffled) and where hard negatives came from."""
        rng = random.Random(self.cfg.seed * 1_000_003 + epoch)
        source = "none"
        pairs: list[Pair] = []
        if self.sampler is not None:
            if self.cfg.hard_negatives > 0:
                if epoch == 0 and self.init_dir is None:
                    # an untrained encoder's neighbours are noise: start from lexical (BM25) neighbours
                    self.sampler.set_neighbours(lexical_neighbours(self.cfg.hard_k))
                    source = "bm25"
                elif epoch % self.cfg.hard_refresh_every == 0 or self.sampler.neighbours is None:
                    self.sampler.set_neighbours(encoder_neighbours(self._encode, self.cfg.hard_k))
                    source = "model"
                else:
                    source = "model (previous)"
            pairs = self.sampler.sample(rng)
        pairs = pairs + self.data.file_pairs
        rng.shuffle(pairs)
        return pairs, source

    # ---- metrics ----------------------------------------------------------------------------------
    def dev_metric(self) -> tuple[str, float]:
        if self.data.dev_queries is not None:
            scoped = [(q, f) for q, f in self.data.dev_queries if f is not None]
            kb = self.data.dev_kb if self.data.dev_kb is not None else list(zip(self.kb_questions, self.kb_faq_ids))
            return "dev_top1", retrieval_top1(self._encode, scoped, kb)
        if self.data.held_out:  # retrieval of held-out phrasings: the measure the base is compared on
            return "heldout_top1", retrieval_top1(self._encode, self.data.held_out,
                                                  list(zip(self.kb_questions, self.kb_faq_ids)))
        if self.data.dev_pairs:
            return "dev_pair_accuracy", self.pair_accuracy(self.data.dev_pairs)
        return "train_loss", float("nan")

    def pair_accuracy(self, pairs: Sequence[Pair]) -> float:
        u = self._encode([p.q1 for p in pairs])
        v = self._encode([p.q2 for p in pairs])
        cos = np.sum(u * v, axis=1)
        cfg = self.model.config
        prob = sigmoid(cfg.gamma * (cos - cfg.alpha))
        labels = np.array([p.label for p in pairs])
        return float(np.mean((prob >= 0.5) == (labels == 1)))

    # ---- training -----------------------------------------------------------------------------------
    def train_epoch(self, pairs: list[Pair], deadline: float | None) -> dict:
        from tqdm import tqdm

        cfg, model = self.cfg, self.model
        mc = model.config
        multitask = model.intent_head is not None and mc.use_multitask and mc.lambda_ < 1.0
        lam = mc.lambda_ if multitask else 1.0
        classes = self.data.classes
        model.train()
        sums = Counter()
        n_done, n_batches, partial = 0, 0, False
        t0 = time.perf_counter()
        bar = tqdm(total=len(pairs), unit="pair", desc=f"epoch {self.epoch + 1}", file=sys.stderr,
                   leave=False, mininterval=1.0)
        try:
            for start in range(0, len(pairs), cfg.batch_size):
                if deadline is not None and time.monotonic() > deadline:
                    partial = True
                    break
                batch = pairs[start : start + cfg.batch_size]
                n = len(batch)
                inputs = self._batch([p.q1 for p in batch] + [p.q2 for p in batch])
                y = torch.tensor([float(p.label) for p in batch], device=self.device)
                with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=self.use_amp):
                    # the matching layer compares what the index will store (u alone, or fused with MiniLM)
                    sent, vecs = model.encode_inputs(inputs)
                sent, vecs = sent.float(), vecs.float()  # losses in fp32: cosine and BCE are sensitive at gamma ~ 10
                u, v = vecs[:n], vecs[n:]
                cos = F.cosine_similarity(u, v, dim=-1, eps=1e-8)
                match_loss = F.binary_cross_entropy_with_logits(mc.gamma * (cos - mc.alpha), y)
                loss = lam * match_loss
                if multitask:
                    labels = torch.tensor([classes.class_of(p.q1) for p in batch]
                                          + [classes.class_of(p.q2) for p in batch], device=self.device)
                    logits = model.intent_head(sent)
                    intent_loss = (F.cross_entropy(logits[:n], labels[:n]) + F.cross_entropy(logits[n:], labels[n:])) / 2
                    loss = loss + (1.0 - lam) * intent_loss
                    sums["intent_loss"] += float(intent_loss.detach()) * n
                    sums["intent_acc"] += float((logits.argmax(-1) == labels).float().mean()) * n
                self.optimizer.zero_grad(set_to_none=True)
                self.scaler.scale(loss).backward()
                if cfg.grad_clip:
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                sums["loss"] += float(loss.detach()) * n
                sums["match_loss"] += float(match_loss.detach()) * n
                sums["match_acc"] += float(((cos > mc.alpha).float() == y).float().mean()) * n
                n_done += n
                n_batches += 1
                bar.update(n)
                bar.set_postfix(loss=f"{sums['loss'] / n_done:.4f}", refresh=False)
        finally:
            bar.close()
        seconds = time.perf_counter() - t0
        stats = {k: v / max(n_done, 1) for k, v in sums.items()}
        stats.update({"pairs": n_done, "batches": n_batches, "train_s": seconds,
                      "pairs_per_s": n_done / max(seconds, 1e-9), "partial": partial})
        return stats

    def save_best(self) -> None:
        self.encoder.save(self.out, readme=None)
        # training goes on changing the weights: let the encoder id follow them again, not the saved file
        self.encoder._weights_sha = None

    def summary(self) -> dict:
        return {
            "command": self.command,
            "sources": self.sources,
            "data": self.data.describe,
            "init": self.init_dir,
            "vocab_extension": self.vocab_stats,
            "model_config": dataclasses.asdict(self.model.config),
            "train_config": dataclasses.asdict(self.cfg),
            "device": str(self.device),
            "mixed_precision": self.use_amp,
            "epochs_done": self.epoch,
            "best_epoch": self.best_epoch,
            "best_metric": None if self.best_metric == -math.inf else self.best_metric,
            "metric": self.history[-1]["metric_name"] if self.history else None,
            "optimizer": self.optimizer_kind,
            "stop_reason": self.stop_reason,
            "history": self.history,
        }

    def write_reports(self) -> None:
        summary = self.summary()
        tmp = self.out / (TRAINING_FILE + ".tmp")
        tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.out / TRAINING_FILE)
        (self.out / "README.md").write_text(model_readme(summary), encoding="utf-8")

    def run(self) -> dict:
        cfg = self.cfg
        deadline = time.monotonic() + cfg.max_minutes * 60 if cfg.max_minutes else None
        if self.epoch >= cfg.epochs:
            self.stop_reason = f"already trained {self.epoch} epochs (--epochs {cfg.epochs})"
        log.info("training %s on %s (mixed precision %s): %s", self.encoder.id, self.device, self.use_amp,
                 json.dumps(self.data.describe))
        try:
            while self.stop_reason is None and self.epoch < cfg.epochs:
                t_epoch = time.perf_counter()
                t = time.perf_counter()
                pairs, hard_source = self.epoch_pairs(self.epoch)
                sample_s = time.perf_counter() - t
                _set_epoch_lr(self.optimizer, self.optimizer_kind, self.epoch, cfg)
                stats = self.train_epoch(pairs, deadline)
                t = time.perf_counter()
                metric_name, metric = self.dev_metric()
                if metric_name == "train_loss":  # nothing held out: fall back to -loss
                    metric = -stats["loss"]
                eval_s = time.perf_counter() - t
                self.epoch += 1
                improved = metric > self.best_metric + cfg.min_delta
                if improved:
                    self.best_metric, self.best_epoch, self.bad_epochs = metric, self.epoch, 0
                    self.save_best()
                elif not stats["partial"]:  # an epoch cut short by the time budget is not a stall
                    self.bad_epochs += 1
                row = {
                    "epoch": self.epoch, "optimizer": self.optimizer_kind,
                    "lr": self.optimizer.param_groups[0]["lr"], "hard_negatives": hard_source,
                    "metric_name": metric_name, "metric": metric, "best": improved,
                    "sample_s": round(sample_s, 3), "eval_s": round(eval_s, 3),
                    "epoch_s": round(time.perf_counter() - t_epoch, 3),
                    **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in stats.items()},
                }
                self.history.append(row)
                log.info(
                    "epoch %d [%s lr %.0e] loss %.4f (match %.4f, intent %s) %s %.4f%s | %d pairs, %.0f pairs/s%s",
                    self.epoch, self.optimizer_kind, row["lr"], stats["loss"], stats["match_loss"],
                    f"{stats['intent_loss']:.4f}" if "intent_loss" in stats else "-", metric_name, metric,
                    " *best*" if improved else "", stats["pairs"], stats["pairs_per_s"],
                    " (partial: time budget)" if stats["partial"] else "",
                )
                if not improved and not stats["partial"]:
                    if self.optimizer_kind == "adam" and self.bad_epochs >= cfg.patience_switch:
                        self.optimizer_kind = "sgd"
                        self.optimizer = _make_optimizer("sgd", self.model, cfg)
                        self.bad_epochs = 0
                        log.info("dev metric stalled: switching Adam -> SGD lr %g", cfg.sgd_lr)
                    elif self.optimizer_kind == "sgd" and self.bad_epochs >= cfg.patience:
                        self.stop_reason = f"early stop: no improvement for {cfg.patience} epochs after the SGD switch"
                if stats["partial"] or (deadline is not None and time.monotonic() > deadline):
                    self.stop_reason = f"time budget of {cfg.max_minutes} minutes reached"
                self.save_checkpoint()
                self.write_reports()
            if self.stop_reason is None:
                self.stop_reason = f"reached --epochs {cfg.epochs}"
        except KeyboardInterrupt:
            # keep what was learned: the checkpoint holds the current weights with the last completed
            # epoch count, so --resume redoes the interrupted epoch from these weights
            self.stop_reason = "interrupted"
            log.warning("interrupted: saving a checkpoint to %s", self.out / CHECKPOINT_FILE)
            self.save_checkpoint()
            self.write_reports()
            raise
        if self.best_epoch == 0:  # e.g. --resume of a finished run with nothing new: still leave a model
            self.save_best()
        self.write_reports()
        log.info("done (%s): best %s %.4f at epoch %d -> %s", self.stop_reason,
                 self.history[-1]["metric_name"] if self.history else "metric", self.best_metric,
                 self.best_epoch, self.out)
        return self.summary()


def model_readme(summary: dict) -> str:
    data, mc, tc = summary["data"], summary["model_config"], summary["train_config"]
    lines = [
        "# MSEM model",
        "",
        "Multi-task Sentence Encoding Model (Baidu, IJCNN 2019) trained with `faq train msem`.",
        "",
        "```",
        summary["command"],
        "```",
        "",
        f"- data: {json.dumps(summary['sources'])}",
        f"- {data['faqs']} FAQs / {data['kb_questions']} KB questions, {data['file_pairs']} labelled pairs, "
        f"{data['intent_classes']} intent classes (incl. 'other')",
        f"- word representation: {mc.get('word_repr', 'glove_char')}"
        + (f" (frozen packaged {TOKEN_BASES[mc['word_repr']][0]} token states, not stored here)"
           if mc.get("word_repr") in TOKEN_BASES else " (GloVe 6B-50d ++ char-CNN)"),
        f"- init: {summary['init'] or 'fresh'}",
        f"- encoder: hidden {mc['hidden']}, heads {mc['heads']}, max_len {mc['max_len']}, "
        f"sentence_dim {MsemConfig(**mc).sentence_dim}; gamma {mc['gamma']}, alpha "
        f"{mc['alpha']}, lambda {mc['lambda_']}, multitask {mc['use_multitask']}",
        f"- training: batch {tc['batch_size']}, Adam lr {tc['lr']} then SGD lr {tc['sgd_lr']}, seed {tc['seed']}, "
        f"device {summary['device']} (mixed precision {summary['mixed_precision']})",
        f"- result: best {summary['metric']} = {summary['best_metric']} at epoch {summary['best_epoch']} "
        f"of {summary['epochs_done']} ({summary['stop_reason']})",
        "",
        "| epoch | optimizer | loss | match | intent | metric | pairs/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary["history"]:
        lines.append(
            f"| {row['epoch']} | {row['optimizer']} | {row['loss']:.4f} | {row['match_loss']:.4f} | "
            f"{row.get('intent_loss', float('nan')):.4f} | {row['metric']:.4f}{' *' if row['best'] else ''} | "
            f"{row['pairs_per_s']:.0f} |"
        )
    lines += ["", "Per-epoch details: training.json. p(match) = sigmoid(gamma * (cos - alpha))."]
    return "\n".join(lines) + "\n"


def retrieval_top1(encode: Any, queries: Sequence[tuple[str, str]], kb: Sequence[tuple[str, str]]) -> float:
    """Share of (query, faq_id) whose nearest KB question (exact cosine) belongs to their FAQ; `encode`
    maps texts to L2-normalised rows (any `Encoder.encode`)."""
    if not queries:
        return float("nan")
    kb_vecs = encode([q for q, _ in kb])
    vecs = encode([q for q, _ in queries])
    nearest = np.empty(len(vecs), dtype=np.int64)
    for start in range(0, len(vecs), 2048):  # chunked exact search
        nearest[start : start + 2048] = np.argmax(vecs[start : start + 2048] @ kb_vecs.T, axis=1)
    return sum(kb[j][1] == f for j, (_, f) in zip(nearest.tolist(), queries)) / len(queries)


# ---------------------------------------------------------------------------------------------
# selection: a fine-tuned model is kept only when it beats the zero-shot base on labelled user queries

SELECTION_FILE = "selection.json"
#: below these, a KB is too thin to fine-tune on, or a comparison too small to trust
MIN_MULTI_PHRASING_FAQS = 10
MIN_SELECTION_QUERIES = 10


#: fusion weights tried on the --dev queries after training (token-state models with fusion only)
FUSION_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def tune_fusion(data: TrainData, out_dir: str | Path, grid: Sequence[float] = FUSION_GRID,
                device: str | None = None) -> dict | None:
    """Choose the model's `minilm_fusion` w (how much of the base's own sentence vector the output
    keeps) on the --dev queries and rewrite config.json with it; returns what was tried, or None when
    the model has no fusion or too few queries. Without --dev the held-out KB phrasings are measured
    for information only and the trained w is kept (they are written like the KB, not like users, and
    w moves the model towards or away from the base). No weight changes: the fused vector is
    [sqrt(1-w)·û ; sqrt(w)·m̂], so one encode at the trained w gives every w's cosines."""
    out = Path(out_dir)
    encoder = MsemEncoder.load(out, device=device)
    cfg = encoder.config
    what, queries, kb = selection_queries(data)
    if not cfg.uses_token_states or cfg.minilm_fusion <= 0 or len(queries) < MIN_SELECTION_QUERIES or not grid:
        return None
    vecs = encoder.encode([q for q, _ in kb] + [q for q, _ in queries])
    w0, n = cfg.minilm_fusion, len(kb)
    u = vecs[:, : cfg.u_dim] / math.sqrt(1 - w0)  # û, (n + q, u_dim)
    m = vecs[:, cfg.u_dim:] / math.sqrt(w0)  # m̂, (n + q, token_dim)
    cos_u, cos_m = u[n:] @ u[:n].T, m[n:] @ m[:n].T  # (q, n) each
    faq_of = np.array([f for _, f in kb])
    gold = np.array([f for _, f in queries])
    scores = {float(w): float(np.mean(faq_of[np.argmax((1 - w) * cos_u + w * cos_m, axis=1)] == gold))
              for w in sorted({*grid, w0})}
    applied = data.dev_queries is not None
    best = max(scores, key=lambda w: (scores[w], -abs(w - w0))) if applied else w0  # ties: the trained weight
    if best != w0:
        config_path = out / "config.json"
        meta = json.loads(config_path.read_text(encoding="utf-8"))
        meta["minilm_fusion"] = best
        config_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    log.info("fusion weight on %d %s: %s -> w = %s (trained with %s%s)", len(queries), what,
             ", ".join(f"{w:g}: {v:.4f}" for w, v in scores.items()), best, w0,
             "" if applied else "; kept: no --dev, held-out KB phrasings do not decide")
    record = {"queries": what, "top1_by_w": {f"{w:g}": round(v, 4) for w, v in scores.items()},
              "trained_w": w0, "chosen_w": best}
    if not applied:
        record["reason"] = (f"trained w kept: {what} are written like the KB, not like users, so without "
                            f"labelled user queries (--dev) they do not choose the weight")
    return record


def thin_kb_reason(groups: Mapping[str, Sequence[str]]) -> str | None:
    """Why a KB is too thin to fine-tune on (paraphrase training needs FAQs with 2+ phrasings), or None."""
    multi = sum(len(qs) >= 2 for qs in groups.values())
    if multi < MIN_MULTI_PHRASING_FAQS:
        return (f"only {multi} of {len(groups)} FAQs have 2 or more phrasings (at least {MIN_MULTI_PHRASING_FAQS} "
                f"are needed to learn from paraphrases)")
    return None


def selection_queries(data: TrainData) -> tuple[str, list[tuple[str, str]], list[tuple[str, str]]]:
    """(what they are, queries, KB they are matched against): the in-scope --dev queries, else the KB
    questions held out of training (measured for information only), against the questions the model
    trained on."""
    kb = data.dev_kb if data.dev_kb is not None else [(q, f) for f, qs in data.groups.items() for q in qs]
    if data.dev_queries is not None:
        return "dev queries", [(q, f) for q, f in data.dev_queries if f is not None], kb
    return "held-out KB phrasings", list(data.held_out), kb


def no_dev_reason(baseline: str) -> str:
    """Why a fine-tune is not kept without --dev (the held-out numbers never decide)."""
    return (f"held-out KB phrasings are written like the KB, not like users, so without labelled user queries "
            f"(--dev) the zero-shot {baseline} is kept")


def select_model(data: TrainData, out_dir: str | Path, baseline: str, device: str | None = None,
                 thin_reason: str | None = None, tuned_top1: float | None = None) -> dict:
    """Compare the trained model in `out_dir` with the zero-shot `baseline` encoder on the same labelled
    user queries (--dev); write and return `selection.json` {kept: "fine-tuned" | "base", encoder: the spec
    to serve, ...}. Only --dev queries decide: without them the base is kept, and both models' top-1 on the
    held-out KB phrasings is recorded for information (phrasings written like the KB flattered a fine-tune
    that was worse on real user queries). `tuned_top1`: the model's top-1 on those queries when training
    already measured it (it is then not encoded again)."""
    from models.encoders.load import load_encoder

    out = Path(out_dir)
    what, queries, kb = selection_queries(data)
    decides = data.dev_queries is not None
    record: dict[str, Any] = {"baseline": baseline, "queries": what, "n_queries": len(queries)}
    if thin_reason is not None:
        record |= {"kept": "base", "reason": f"the KB is too thin to fine-tune on: {thin_reason}"}
    elif len(queries) < MIN_SELECTION_QUERIES:
        record |= {"kept": "base", "reason": no_dev_reason(baseline) if not decides else (
            f"only {len(queries)} in-scope {what} to compare on (at least {MIN_SELECTION_QUERIES} needed): "
            f"without a measurement the base is kept; label more user queries for --dev")}
    else:
        base_top1 = retrieval_top1(load_encoder(baseline, device=device).encode, queries, kb)
        if tuned_top1 is None:
            tuned_top1 = retrieval_top1(MsemEncoder.load(out, device=device).encode, queries, kb)
        better = tuned_top1 > base_top1
        measured = (f"top-1 on {len(queries)} {what}: fine-tuned {tuned_top1:.4f} "
                    f"{'>' if better else '<='} zero-shot {baseline} {base_top1:.4f}")
        record |= {
            "metric": "top1", "fine_tuned": round(tuned_top1, 4), "base": round(base_top1, 4),
            "kept": "fine-tuned" if better and decides else "base",
            "reason": measured if decides else f"{no_dev_reason(baseline)} ({measured}, for information only)",
        }
    record["encoder"] = str(out) if record["kept"] == "fine-tuned" else baseline
    out.mkdir(parents=True, exist_ok=True)
    (out / SELECTION_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def read_selection(model_dir: str | Path) -> dict | None:
    path = Path(model_dir) / SELECTION_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def train_msem(
    kb_path: str | Path | Sequence[str | Path] | None,
    out_dir: str | Path,
    pairs_path: str | Path | Sequence[str | Path] | None = None,
    dev_path: str | Path | None = None,
    init_dir: str | Path | None = None,
    config_overrides: str | Mapping[str, Any] | None = None,
    train_config: TrainConfig | None = None,
    resume: bool = False,
    device: str | None = None,
    command: str | None = None,
    glove: Any = None,
    dev_kb_path: str | Path | None = None,
    baseline: str | None = None,
    fusion_grid: Sequence[float] = (),
) -> dict:
    """Read the files, build the data, train; returns the training summary.

    With `baseline` (an encoder spec such as "mpnet"), the trained model is then compared with that
    encoder used zero-shot on the dev queries and `summary["selection"]` (also `selection.json` in
    `out_dir`) says which one to serve; without dev queries that is the baseline (the held-out KB
    phrasings are measured for information only), and a KB too thin to learn from is not trained on at
    all. With `fusion_grid`, a token-state model's fusion weight is first chosen on the dev queries
    (`tune_fusion`; without them the trained weight stays).

    Several KB files train together (e.g. a general model on several datasets): with more than one, each
    file's faq_ids are prefixed with its folder name (`clinc150/book_flight`) so that FAQs of different
    files never merge. Several pair files are concatenated."""
    from kb.records import read_kb
    from training.pairs import read_pair_file

    cfg = train_config or TrainConfig()
    kb_paths = _as_list(kb_path)
    pair_paths = _as_list(pairs_path)
    records = _read_kbs(kb_paths, read_kb)
    pairs = [p for path in pair_paths for p in read_pair_file(path)]
    dev_kb = read_kb(dev_kb_path) if dev_kb_path else None
    if dev_kb is not None and not dev_path:
        raise TrainError("--dev-kb needs --dev (the queries matched against it)")
    dev = read_dev_queries(dev_path, dev_kb if dev_kb is not None else records,
                           "--dev-kb" if dev_kb is not None else "the KB") if dev_path else None
    overrides = parse_config_overrides(config_overrides)
    data = prepare_data(records, pairs, dev, cfg, dev_kb=dev_kb)
    sources = {"kb": [str(p) for p in kb_paths] or None, "pairs": [str(p) for p in pair_paths] or None,
               "dev": str(dev_path) if dev_path else None, "dev_kb": str(dev_kb_path) if dev_kb_path else None}
    thin = thin_kb_reason(data.groups) if baseline and data.groups and not pairs else None
    if thin is not None:
        log.warning("not fine-tuning: %s; the zero-shot %s is used", thin, baseline)
        return {"selection": select_model(data, out_dir, baseline, device, thin_reason=thin), "trained": False}
    trainer = Trainer(data, out_dir, cfg, overrides, init_dir=init_dir, resume=resume, device=device,
                      command=command, sources=sources, glove=glove)
    summary = trainer.run()
    summary["trained"] = True
    # the best epoch's dev / held-out top-1 is the selection's measure of the saved model already
    measured = summary["best_metric"] if summary.get("metric") in ("dev_top1", "heldout_top1") else None
    if fusion_grid and (tuned := tune_fusion(data, out_dir, fusion_grid, device)) is not None:
        summary["fusion"] = tuned
        measured = tuned["top1_by_w"][f"{tuned['chosen_w']:g}"]
    if baseline:
        summary["selection"] = select_model(data, out_dir, baseline, device, tuned_top1=measured)
        log.info("selection: kept the %s model (%s)", summary["selection"]["kept"], summary["selection"]["reason"])
    return summary


def read_dev_queries(dev_path: str | Path, records: Sequence[Any], where: str = "the KB") -> list[Any]:
    """Read the --dev queries and check them against the KB `records` they are matched against: a
    missing file, an unreadable one or a faq_id the KB lacks raises TrainError naming the file (before any
    training; `faq quickstart --dev` checks with this too)."""
    from kb.records import KbValidationError, read_queries

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


def _as_list(value: str | Path | Sequence[str | Path] | None) -> list[str | Path]:
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [value]
    return list(value)


def _read_kbs(paths: Sequence[str | Path], read_kb: Any) -> list[Any]:
    if len(paths) <= 1:
        return read_kb(paths[0]) if paths else []
    prefixes = [Path(p).resolve().parent.name or f"kb{i}" for i, p in enumerate(paths)]
    if len(set(prefixes)) < len(prefixes):
        prefixes = [f"{pre}{i}" for i, pre in enumerate(prefixes)]
    return [
        dataclasses.replace(r, faq_id=f"{pre}/{r.faq_id}")
        for pre, path in zip(prefixes, paths) for r in read_kb(path)
    ]
