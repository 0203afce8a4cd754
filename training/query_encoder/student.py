"""Fine-tuning the query encoder after its ridge fit: MiniLM's top N layers and the projection learn to put
a sentence where the teacher (mpnet) puts it.

    frozen MiniLM layers 1..6-N (states cached once per sentence, fp16)
      -> trainable copies of layers 7-N..6 -> masked mean pool -> L2 -> x W + b -> L2 -> s (B, 768)
    loss = mean(1 - cos(s, t)) + contrastive * CE(s tᵀ / temperature, diagonal)     t: teacher vectors (B, 768)

The first term pulls each query onto the teacher's vector of the same text (with `typos`, a share of the
texts carry a user-like slip each time they are drawn, slips.py, and still aim at the clean text's vector); the in-batch term ranks it
above the teacher's vectors of the other sentences in the batch, which is how it is used (a query against
the FAQ side's vectors). The pooling is sentence-transformers' (every wordpiece, [CLS] and [SEP] too), so
the served base (the packaged MiniLM with these layers, models/encoders/query.py) computes the same
vector.

With `groups` (a KB refinement: each text's FAQ) the in-batch term becomes the KB's own ranking: a
phrasing or answer against the teacher's vectors of every other text of the KB, its FAQ's other texts the
positives (itself left out, or the term would only repeat the first one):

    kb_loss = -log( Σ_pos exp(s·t_j / τ) / Σ_{j ≠ self} exp(s·t_j / τ) )

Patience and the best epoch follow the dev queries' top-1 (training/query_encoder/dev.py) when dev sets
are given, else the held-out sentences' nearest-neighbour agreement. With dev sets the starting point is
measured first and counts as epoch 0: an epoch is only kept if it beats it.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from training.loop import TrainError, Trainer
from training.query_encoder.slips import slip
from training.query_encoder.vectors import agreement

log = logging.getLogger(__name__)


class StudentTrainer(Trainer):
    def __init__(self, out_dir: str | Path, cfg: Any, *, texts: Sequence[str], teacher_vectors: np.ndarray,
                 train_idx: np.ndarray, held_idx: np.ndarray, weight: np.ndarray, bias: np.ndarray, teacher_id: str,
                 device: str | None = None, cache_dir: str | Path | None = None, resume: bool = False,
                 dev_sets: Sequence[Any] = (), groups: np.ndarray | None = None,
                 init_layers: Mapping[str, np.ndarray] | None = None):
        self.texts, self.teacher = list(texts), torch.from_numpy(np.asarray(teacher_vectors, dtype=np.float32))
        self.train_idx, self.held_idx = np.asarray(train_idx), np.asarray(held_idx)
        self.ridge = (np.asarray(weight, np.float32), np.asarray(bias, np.float32))
        self.teacher_id, self.device_arg, self.cache_dir = teacher_id, device, cache_dir
        self.dev_sets = list(dev_sets)
        self.groups = None if groups is None else torch.as_tensor(np.asarray(groups), dtype=torch.long)
        self.init_layers = init_layers
        self.held_out: dict = {}
        self.dev: dict = {}
        super().__init__(out_dir, cfg, resume=resume)

    # ---- model ------------------------------------------------------------------------------------
    def build(self, checkpoint: dict | None) -> None:
        from models.encoders.base import pick_device
        from models.encoders.msem.layers import MiniLMLayer
        from models.encoders.words import MiniLMText

        cfg = self.cfg
        self.device = torch.device(pick_device(self.device_arg))
        self.text = MiniLMText(device=self.device, base="minilm", cache_dir=self.cache_dir)
        self.first = self.text.total_layers - cfg.train_layers  # layers the cached states have been through
        self.top = torch.nn.ModuleList(MiniLMLayer() for _ in range(cfg.train_layers))
        for i, layer in enumerate(self.top):
            state = self.text.layer_state(self.first + i)
            if self.init_layers:  # a trained query encoder's layers (a KB refinement starts from them)
                prefix = f"encoder.layer.{self.first + i}."
                state = {k[len(prefix):]: torch.from_numpy(np.asarray(v, np.float32))
                         for k, v in self.init_layers.items() if k.startswith(prefix)} or state
            layer.load_hf_state(state)
        self.text.stop_after(self.first)
        self.projection = torch.nn.Linear(self.ridge[0].shape[0], self.ridge[0].shape[1])
        with torch.no_grad():
            self.projection.weight.copy_(torch.from_numpy(self.ridge[0].T))
            self.projection.bias.copy_(torch.from_numpy(self.ridge[1]))
        if checkpoint is not None:
            try:
                self.top.load_state_dict(checkpoint["top"])
                self.projection.load_state_dict(checkpoint["projection"])
            except (KeyError, RuntimeError) as exc:
                raise TrainError(f"--resume: {self.out / self.checkpoint_file} does not fit this run ({exc})") from exc
        self.top.to(self.device)
        self.projection.to(self.device)
        self.optimizer = torch.optim.AdamW([
            {"params": self.top.parameters(), "lr": cfg.lr},
            {"params": self.projection.parameters(), "lr": cfg.lr_projection},
        ], weight_decay=0.01)

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.start_metric = checkpoint.get("start_metric")  # measured once, before the first epoch
        super().restore(checkpoint)

    def checkpoint_state(self) -> dict:
        return {"top": self.top.state_dict(), "projection": self.projection.state_dict(),
                "optimizer": self.optimizer.state_dict(), "start_metric": getattr(self, "start_metric", None)}

    def forward(self, texts: Sequence[str], remember: bool = True) -> torch.Tensor:
        """Sentences -> (B, 768) L2-normalised, through the cached frozen states and the trainable layers."""
        inputs = self.text.batch_inputs(list(texts), device=self.device, max_len=self.cfg.max_len, remember=remember)
        x, mask = inputs["token_states"], inputs["mask"]  # (B, T, 384), (B, T)
        for layer in self.top:
            x = layer(x, mask)
        m = mask.unsqueeze(-1).float()
        pooled = F.normalize((x * m).sum(1) / m.sum(1).clamp(min=1.0), dim=-1)  # (B, 384)
        return F.normalize(self.projection(pooled), dim=-1)  # (B, 768)

    # ---- the loop's hooks -------------------------------------------------------------------------
    def prepare(self) -> None:
        n = self.text.fill_cache(self.texts, self.cfg.max_len)
        log.info("cached MiniLM's layer-%d states of %d sentences (%.0f MB)", self.first, n,
                 self.text.cache_bytes() / 2**20)
        if self.dev_sets and self.epoch == 0:
            self.metric_name, self.metric = self.evaluate({})
            self.start_metric = self.metric
            self.best_metric, self.best_epoch = self.metric, 0
            log.info("before training: %s %.4f (an epoch is kept only if it beats this)", self.metric_name, self.metric)
            self.save_best()

    def train_epoch(self) -> dict:
        cfg = self.cfg
        self.top.train()
        order = np.random.permutation(self.train_idx)[: self.cfg.epoch_sentences or None]
        batches = [order[i:i + cfg.batch_size] for i in range(0, len(order), cfg.batch_size)]
        losses = []
        bar = self.progress(len(batches), "batch")
        slipped = np.random.default_rng([self.cfg.seed, self.epoch])
        for idx in self.in_time(batches):
            texts = [self.texts[i] for i in idx]
            if cfg.typos:  # the teacher's vector of the clean text stays the target (slips.py)
                texts = [slip(t, slipped) if slipped.random() < cfg.typos else t for t in texts]
            s = self.forward(texts, remember=not cfg.typos)
            t = self.teacher[idx].to(self.device)
            loss = (1.0 - (s * t).sum(-1)).mean()
            if cfg.contrastive and self.groups is not None:
                loss = loss + cfg.contrastive * self.kb_loss(s, torch.as_tensor(idx))
            elif cfg.contrastive:
                logits = s @ t.T / cfg.temperature  # (B, B): each sentence against the batch's teacher vectors
                loss = loss + cfg.contrastive * F.cross_entropy(logits, torch.arange(len(idx), device=self.device))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(float(loss.detach()))
            bar.update(1)
        bar.close()
        return {"train_loss": float(np.mean(losses)) if losses else None, "batches": len(losses)}

    def kb_loss(self, s: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Each text of the batch against every KB text's teacher vector; its FAQ's other texts are the
        positives. Texts whose FAQ has no other text carry no ranking signal and are skipped."""
        assert self.groups is not None
        members = torch.from_numpy(self.train_idx)  # every KB text
        logits = s @ self.teacher[members].to(self.device).T / self.cfg.temperature  # (B, K)
        same = self.groups[idx].unsqueeze(1) == self.groups[members].unsqueeze(0)  # (B, K)
        self_col = idx.unsqueeze(1) == members.unsqueeze(0)
        logits = logits.masked_fill(self_col.to(self.device), float("-inf"))
        positive = (same & ~self_col).to(self.device)
        has = positive.any(1)
        if not bool(has.any()):
            return s.sum() * 0.0
        pos = torch.logsumexp(logits.masked_fill(~positive, float("-inf")), dim=1)
        return (torch.logsumexp(logits, dim=1) - pos)[has].mean()

    @torch.no_grad()
    def vectors(self, idx: np.ndarray) -> np.ndarray:
        return self.encode_texts([self.texts[i] for i in idx])

    @torch.no_grad()
    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        self.top.eval()
        if not texts:
            return np.zeros((0, self.projection.out_features), dtype=np.float32)
        out = [self.forward(texts[k:k + 512]).cpu().numpy() for k in range(0, len(texts), 512)]
        return np.concatenate(out)

    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        if len(self.held_idx):
            self.held_out = agreement(self.vectors(self.held_idx), self.teacher[self.held_idx].numpy(),
                                      seed=self.cfg.seed)
            log.info("held out: mean cosine %.4f, nearest-neighbour agreement %.4f", self.held_out["mean_cosine"],
                     self.held_out["nearest_agreement"])
        if not self.dev_sets:
            return "nearest_agreement", self.held_out["nearest_agreement"]
        self.dev = {d.name: round(d.top1(self.encode_texts(d.queries), self.cfg.answer_weight), 4)
                    for d in self.dev_sets}
        mean = float(np.mean(list(self.dev.values())))
        log.info("dev top-1: %s (mean %.4f)", ", ".join(f"{k} {v:.3f}" for k, v in self.dev.items()), mean)
        return "dev_top1", mean

    def epoch_row(self, stats: Mapping[str, Any], improved: bool, eval_s: float, epoch_s: float) -> dict:
        return {**super().epoch_row(stats, improved, eval_s, epoch_s), "dev_top1": dict(self.dev),
                "held_out": dict(self.held_out)}

    def save_best(self) -> None:
        from models.encoders.query import save_query_encoder

        hf = {}
        for i, layer in enumerate(self.top):
            inverse = {ours: theirs for theirs, ours in layer.HF_NAMES.items()}
            for key, value in layer.state_dict().items():
                module, _, param = key.rpartition(".")
                hf[f"encoder.layer.{self.first + i}.{inverse[module]}.{param}"] = value.detach().cpu().numpy()
        weight = self.projection.weight.detach().cpu().numpy().T
        bias = self.projection.bias.detach().cpu().numpy()
        save_query_encoder(self.out, weight, bias, base=self.cfg.base, teacher=self.teacher_id, top_layers=hf,
                           train_layers=self.cfg.train_layers,
                           fit={**self.fit_note, "epoch": self.epoch, "held_out": self.held_out, "dev_top1": self.dev})

    fit_note: dict = {"method": "ridge, then fine-tuned"}

    def summary(self) -> dict:
        out = {**super().summary(), "held_out": self.held_out, "teacher_id": self.teacher_id}
        if self.dev_sets:
            out["dev_top1_start"] = getattr(self, "start_metric", None)
            out["kept"] = "start" if self.best_epoch == 0 else f"epoch {self.best_epoch}"
        return out
