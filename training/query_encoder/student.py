"""Fine-tuning the query encoder after its ridge fit: MiniLM's top N layers and the projection learn to put
a sentence where the teacher (mpnet) puts it.

    frozen MiniLM layers 1..6-N (states cached once per sentence, fp16)
      -> trainable copies of layers 7-N..6 -> masked mean pool -> L2 -> x W + b -> L2 -> s (B, 768)
    loss = mean(1 - cos(s, t)) + contrastive * CE(s tᵀ / temperature, diagonal)     t: teacher vectors (B, 768)

The first term pulls each query onto the teacher's vector of the same text; the in-batch term ranks it
above the teacher's vectors of the other sentences in the batch, which is how it is used (a query against
the FAQ side's vectors). The pooling is sentence-transformers' (every wordpiece, [CLS] and [SEP] too), so
the served base (the packaged MiniLM with these layers, models/encoders/query.py) computes the same
vector. Patience and the best epoch follow the held-out sentences' nearest-neighbour agreement.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from training.loop import TrainError, Trainer
from training.query_encoder.vectors import agreement

log = logging.getLogger(__name__)


class StudentTrainer(Trainer):
    def __init__(self, out_dir: str | Path, cfg: Any, *, texts: Sequence[str], teacher_vectors: np.ndarray,
                 train_idx: np.ndarray, held_idx: np.ndarray, weight: np.ndarray, bias: np.ndarray, teacher_id: str,
                 device: str | None = None, cache_dir: str | Path | None = None, resume: bool = False):
        self.texts, self.teacher = list(texts), torch.from_numpy(np.asarray(teacher_vectors, dtype=np.float32))
        self.train_idx, self.held_idx = np.asarray(train_idx), np.asarray(held_idx)
        self.ridge = (np.asarray(weight, np.float32), np.asarray(bias, np.float32))
        self.teacher_id, self.device_arg, self.cache_dir = teacher_id, device, cache_dir
        self.held_out: dict = {}
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
            layer.load_hf_state(self.text.layer_state(self.first + i))
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
        super().restore(checkpoint)

    def checkpoint_state(self) -> dict:
        return {"top": self.top.state_dict(), "projection": self.projection.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        """Sentences -> (B, 768) L2-normalised, through the cached frozen states and the trainable layers."""
        inputs = self.text.batch_inputs(list(texts), device=self.device, max_len=self.cfg.max_len)
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

    def train_epoch(self) -> dict:
        cfg = self.cfg
        self.top.train()
        order = np.random.permutation(self.train_idx)
        batches = [order[i:i + cfg.batch_size] for i in range(0, len(order), cfg.batch_size)]
        losses = []
        bar = self.progress(len(batches), "batch")
        for idx in self.in_time(batches):
            s = self.forward([self.texts[i] for i in idx])
            t = self.teacher[idx].to(self.device)
            loss = (1.0 - (s * t).sum(-1)).mean()
            if cfg.contrastive:
                logits = s @ t.T / cfg.temperature  # (B, B): each sentence against the batch's teacher vectors
                loss = loss + cfg.contrastive * F.cross_entropy(logits, torch.arange(len(idx), device=self.device))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(float(loss.detach()))
            bar.update(1)
        bar.close()
        return {"train_loss": float(np.mean(losses)) if losses else None, "batches": len(losses)}

    @torch.no_grad()
    def vectors(self, idx: np.ndarray) -> np.ndarray:
        self.top.eval()
        out = [self.forward([self.texts[i] for i in idx[k:k + 512]]).cpu().numpy() for k in range(0, len(idx), 512)]
        return np.concatenate(out)

    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        self.held_out = agreement(self.vectors(self.held_idx), self.teacher[self.held_idx].numpy(), seed=self.cfg.seed)
        log.info("held out: mean cosine %.4f, nearest-neighbour agreement %.4f", self.held_out["mean_cosine"],
                 self.held_out["nearest_agreement"])
        return "nearest_agreement", self.held_out["nearest_agreement"]

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
                           fit={"method": "ridge, then fine-tuned", "epoch": self.epoch, "held_out": self.held_out})

    def summary(self) -> dict:
        return {**super().summary(), "held_out": self.held_out, "teacher_id": self.teacher_id}
