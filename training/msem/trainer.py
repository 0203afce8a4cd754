"""The MSEM trainer (`MsemTrainer`, on training/loop.py) and `train_msem`, which reads the files, trains
and then tunes the fusion weight and picks the model to serve (training/msem/selection.py).

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
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from models.encoders.msem.encoder import MsemEncoder
from models.encoders.msem.model import MSEM, TOKEN_BASES, MsemConfig
from models.encoders.words import MiniLMText, load_text
from models.scoring import sigmoid
from training.loop import TrainError, Trainer
from training.msem.data import TrainConfig, TrainData, as_list, prepare_data, read_dev_queries, read_kbs
from training.msem.selection import retrieval_top1, select_model, thin_kb_reason, tune_fusion
from training.msem.warm_start import extend_vocabulary, parse_config_overrides, reconfigure_heads
from training.pairs import KbPairSampler, Pair, encoder_neighbours, lexical_neighbours

log = logging.getLogger(__name__)

CHECKPOINT_TEXT_DIR = "checkpoint_text"


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


class MsemTrainer(Trainer):
    """One MSEM run: the two-optimiser schedule (Adam until the dev metric stalls, then SGD) on the shared
    loop; `run()` returns the summary written to training.json."""

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
        cache_dir: str | Path | None = None,
    ):
        self.data = data
        self.overrides = dict(config_overrides or {})
        self.init_dir = str(init_dir) if init_dir else None
        self.sources = dict(sources or {})
        self.device_arg, self.glove = device, glove
        self.cache_dir = cache_dir  # the model cache of mpnet's states (None: models/encoders/mpnet.py's default)
        self.optimizer_kind = "adam"
        self.vocab_stats: dict[str, int] = {}
        super().__init__(out_dir, cfg, resume=resume, command=command)

        self.sampler = KbPairSampler(
            data.groups, positives=cfg.positives, random_negatives=cfg.random_negatives,
            hard_negatives=cfg.hard_negatives, hard_pool=cfg.hard_pool,
        ) if data.groups else None
        self._tokens: dict[str, list[str]] = {}
        self.kb_questions = [q for qs in data.groups.values() for q in qs]
        self.kb_faq_ids = [f for f, qs in data.groups.items() for _ in qs]
        if isinstance(self.encoder.text, MiniLMText):
            self._fill_minilm_cache()

    @property
    def min_delta(self) -> float:  # type: ignore[override]
        return self.cfg.min_delta

    def build(self, checkpoint: dict | None) -> None:
        data, cfg, device = self.data, self.cfg, self.device_arg
        intents = {"n_intents": data.classes.n_classes if data.classes.n_classes > 1 else 0}
        if checkpoint is not None:
            text = load_text(self.out / CHECKPOINT_TEXT_DIR, cache_dir=self.cache_dir)
            model = MSEM(MsemConfig(**checkpoint["model_config"]))
            model.load_state_dict(checkpoint["model"])
            if model.config.n_intents != intents["n_intents"]:
                raise TrainError(
                    f"--resume: the checkpoint has {model.config.n_intents} intent classes but the data gives "
                    f"{intents['n_intents']}: resume with the same data and seed"
                )
            self.encoder = MsemEncoder(model, text, device=device, name=self.out.resolve().name)
        elif self.init_dir:
            base = MsemEncoder.load(self.init_dir, device=device, cache_dir=self.cache_dir)
            if base.config.uses_token_states:
                self.encoder = reconfigure_heads(base, {**self.overrides, **intents})
            else:
                self.encoder, self.vocab_stats = extend_vocabulary(
                    base, self._all_texts(), {**self.overrides, **intents}, glove=self.glove
                )
        else:
            self.encoder = MsemEncoder.create(
                {**self.overrides, **intents}, self._all_texts(), device=device, glove=self.glove, seed=cfg.seed,
                cache_dir=self.cache_dir,
            )
        self.model: MSEM = self.encoder.model
        self.device = self.encoder.device
        self.use_amp = str(self.device).startswith("cuda")
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = _make_optimizer("adam", self.model, cfg)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.use_amp)

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        self.optimizer_kind = checkpoint["optimizer_kind"]
        self.optimizer = _make_optimizer(self.optimizer_kind, self.model, self.cfg)
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        if checkpoint.get("scaler") and self.use_amp:
            self.scaler.load_state_dict(checkpoint["scaler"])
        self.vocab_stats = checkpoint.get("vocab_stats", {})
        super().restore(checkpoint)

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


    def checkpoint_state(self) -> dict:
        self.encoder.text.save(self.out / CHECKPOINT_TEXT_DIR)  # the vocabulary next to checkpoint.pt
        return {
            "model": self.model.state_dict(),
            "model_config": dataclasses.asdict(self.model.config),
            "optimizer": self.optimizer.state_dict(),
            "optimizer_kind": self.optimizer_kind,
            "scaler": self.scaler.state_dict() if self.use_amp else None,
            "vocab_stats": self.vocab_stats,
        }

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
    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        if self.data.dev_queries is not None:
            scoped = [(q, f) for q, f in self.data.dev_queries if f is not None]
            kb = self.data.dev_kb if self.data.dev_kb is not None else list(zip(self.kb_questions, self.kb_faq_ids))
            return "dev_top1", retrieval_top1(self._encode, scoped, kb)
        if self.data.held_out:  # retrieval of held-out phrasings: the measure the base is compared on
            return "heldout_top1", retrieval_top1(self._encode, self.data.held_out,
                                                  list(zip(self.kb_questions, self.kb_faq_ids)))
        if self.data.dev_pairs:
            return "dev_pair_accuracy", self.pair_accuracy(self.data.dev_pairs)
        return "train_loss", -stats["loss"]  # nothing held out: the training loss, negated

    def pair_accuracy(self, pairs: Sequence[Pair]) -> float:
        u = self._encode([p.q1 for p in pairs])
        v = self._encode([p.q2 for p in pairs])
        cos = np.sum(u * v, axis=1)
        cfg = self.model.config
        prob = sigmoid(cfg.gamma * (cos - cfg.alpha))
        labels = np.array([p.label for p in pairs])
        return float(np.mean((prob >= 0.5) == (labels == 1)))

    # ---- training -----------------------------------------------------------------------------------
    def prepare(self) -> None:
        log.info("training %s on %s (mixed precision %s): %s", self.encoder.id, self.device, self.use_amp,
                 json.dumps(self.data.describe))

    def train_epoch(self) -> dict:
        t = time.perf_counter()
        pairs, self.hard_source = self.epoch_pairs(self.epoch)
        self.sample_s = time.perf_counter() - t
        _set_epoch_lr(self.optimizer, self.optimizer_kind, self.epoch, self.cfg)
        return self.fit(pairs)

    def fit(self, pairs: list[Pair]) -> dict:
        """One pass over `pairs` in batches (while the time budget lasts) -> the epoch's training stats."""
        cfg, model = self.cfg, self.model
        mc = model.config
        multitask = model.intent_head is not None and mc.use_multitask and mc.lambda_ < 1.0
        lam = mc.lambda_ if multitask else 1.0
        classes = self.data.classes
        model.train()
        sums: Counter[str] = Counter()
        n_done, n_batches = 0, 0
        t0 = time.perf_counter()
        bar = self.progress(len(pairs), "pair")
        try:
            for batch in self.in_time(pairs[start : start + cfg.batch_size]
                                      for start in range(0, len(pairs), cfg.batch_size)):
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
                      "pairs_per_s": n_done / max(seconds, 1e-9), "partial": self.partial})
        return stats

    def save_best(self) -> None:
        self.encoder.save(self.out, readme=None)
        self.encoder.follow_live_weights()

    def epoch_row(self, stats: Mapping[str, Any], improved: bool, eval_s: float, epoch_s: float) -> dict:
        return {
            "epoch": self.epoch, "optimizer": self.optimizer_kind,
            "lr": self.optimizer.param_groups[0]["lr"], "hard_negatives": self.hard_source,
            "metric_name": self.metric_name, "metric": self.metric, "best": improved,
            "sample_s": round(self.sample_s, 3), "eval_s": round(eval_s, 3), "epoch_s": round(epoch_s, 3),
            **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in stats.items()},
        }

    def progress_line(self, row: Mapping[str, Any]) -> str:
        intent = f"{row['intent_loss']:.4f}" if "intent_loss" in row else "-"
        return (f"epoch {self.epoch} [{self.optimizer_kind} lr {row['lr']:.0e}] loss {row['loss']:.4f} (match "
                f"{row['match_loss']:.4f}, intent {intent}) {self.metric_name} {self.metric:.4f}"
                f"{' *best*' if row['best'] else ''} | {row['pairs']} pairs, {row['pairs_per_s']:.0f} pairs/s")

    def on_stall(self) -> str | None:
        """Adam until the dev metric stalls `patience_switch` epochs, then SGD from the current weights;
        after the switch, stop when it stalls `patience` epochs."""
        cfg = self.cfg
        if self.optimizer_kind == "adam" and self.bad_epochs >= cfg.patience_switch:
            self.optimizer_kind = "sgd"
            self.optimizer = _make_optimizer("sgd", self.model, cfg)
            self.bad_epochs = 0
            log.info("dev metric stalled: switching Adam -> SGD lr %g", cfg.sgd_lr)
        elif self.optimizer_kind == "sgd" and self.bad_epochs >= cfg.patience:
            return "patience"
        return None

    def stop_message(self, kind: str) -> str:
        if kind == "patience":
            return f"early stop: no improvement for {self.cfg.patience} epochs after the SGD switch"
        return super().stop_message(kind)

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

    def record(self) -> None:
        summary = self.write_report()
        (self.out / "README.md").write_text(model_readme(summary), encoding="utf-8")

    def finish(self) -> dict:
        if self.best_epoch == 0:  # e.g. --resume of a finished run with nothing new: still leave a model
            self.save_best()
        self.record()
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
    cache_dir: str | Path | None = None,
) -> dict:
    """Read the files, build the data, train; returns the training summary.

    With `baseline` (an encoder spec such as "mpnet"), the trained model is then compared with that
    encoder used zero-shot on the dev queries and `summary["selection"]` (also `selection.json` in
    `out_dir`) says which one to serve; without dev queries that is the baseline (the held-out KB
    phrasings are measured for information only), and a KB too thin to learn from is not trained on at
    all. With `fusion_grid`, a token-state model's fusion weight is first chosen on the dev queries
    (`tune_fusion`; without them the trained weight stays). `device` and `cache_dir` (the model cache:
    mpnet and the ONNX exports; None: var/models) go to every model this loads (FAQ_DEVICE, FAQ_MODEL_CACHE
    for `faq train msem`).

    Several KB files train together (e.g. a general model on several datasets): with more than one, each
    file's faq_ids are prefixed with its folder name (`clinc150/book_flight`) so that FAQs of different
    files never merge. Several pair files are concatenated."""
    from kb.files import read_kb
    from training.pairs import read_pair_file

    cfg = train_config or TrainConfig()
    kb_paths = as_list(kb_path)
    pair_paths = as_list(pairs_path)
    records = read_kbs(kb_paths)
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
        return {"selection": select_model(data, out_dir, baseline, device, thin_reason=thin, cache_dir=cache_dir),
                "trained": False}
    trainer = MsemTrainer(data, out_dir, cfg, overrides, init_dir=init_dir, resume=resume, device=device,
                           command=command, sources=sources, glove=glove, cache_dir=cache_dir)
    summary = trainer.run()
    summary["trained"] = True
    # the best epoch's dev / held-out top-1 is the selection's measure of the saved model already
    measured = summary["best_metric"] if summary.get("metric") in ("dev_top1", "heldout_top1") else None
    if fusion_grid and (tuned := tune_fusion(data, out_dir, fusion_grid, device, cache_dir=cache_dir)) is not None:
        summary["fusion"] = tuned
        measured = tuned["top1_by_w"][f"{tuned['chosen_w']:g}"]
    if baseline:
        summary["selection"] = select_model(data, out_dir, baseline, device, tuned_top1=measured, cache_dir=cache_dir)
        log.info("selection: kept the %s model (%s)", summary["selection"]["kept"], summary["selection"]["reason"])
    return summary
