"""The cross-encoder trainer (`RerankTrainer`, on training/loop.py) and `train_reranker`.

Budget: `max_minutes` covers the whole run. After a few phase A steps the measured speed decides
how many phase A steps fit next to phase B, and the learning-rate schedule is planned for that many,
so a cut run still ends with a decayed learning rate (the speed is the median of the timing windows
so far: another job that slows a few windows must not cut phase A for good). A checkpoint
(`checkpoint.pt`: weights, optimiser, phase, step, plan, RNG) is written every `checkpoint_every`
steps and on Ctrl-C; `--resume` continues from it with the same data (`train_pairs_a.tsv` is written
once). `stop_after_minutes` ends one invocation with a checkpoint without changing the plan, so a long
run (mpnet on a CPU) goes in chunks: the same command with `--resume` until it exits 0.
"""
from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from kb.records import kb_groups
from kb.files import read_kb
from models.scoring import fit_platt, sigmoid
from models.matchers.cross_encoder import (
    RerankerConfig, build_module, encode_pairs, export_onnx, load_tokenizer, save_reranker,
)
from training.cross_encoder.data import (
    LabelledPair, intent_pairs, read_pairs_file, read_stsb, read_written_pairs, write_pairs,
)
from training.cross_encoder.edits import augmentation_pairs
from training.loop import TrainError, TrainingPaused, Trainer, write_json_atomic

log = logging.getLogger(__name__)

PAIRS_A_FILE = "train_pairs_a.tsv"
HELDOUT_FILE = "heldout_pairs.tsv"


@dataclass
class RerankTrainConfig:
    base: str = "minilm"  # "minilm" (all-MiniLM-L6-v2, 6 layers) or "mpnet" (all-mpnet-base-v2, 12 layers)
    n_layers: int = 4
    max_len: int = 64
    pooling: str = "mean"
    seed: int = 0
    # phase A
    epochs_a: int = 2
    batch_a: int = 32
    lr_a: float = 7e-5
    anchors_per_faq: int = 40  # sampled KB variants per FAQ (each -> 1 positive + 1 hard negative)
    augment: bool = True
    augment_max: int = 16000  # rule-based pairs at most
    # phase B
    epochs_b: int = 3
    batch_b: int = 16
    lr_b: float = 4e-5
    sts_head: bool = True  # separate regression head + phase A rehearsal in phase B (False: the paper's single head)
    # embeddings and the first N layers stay as pretrained: no backward pass through them (with mpnet's
    # 12 layers, freezing 4 saves about a fifth of a step)
    frozen_layers: int = 0
    # pairs per rehearsal batch (None = batch_b); smaller costs less where a step is expensive (mpnet on a CPU)
    rehearse_batch: int | None = None
    # both
    warmup: float = 0.06
    weight_decay: float = 0.01
    holdout_fraction: float = 0.2  # of every pair file and of the KB anchors: calibration / threshold data
    max_minutes: float | None = None
    # this invocation stops (checkpoint saved, exit code 3) after so many minutes; `--resume` goes on.
    # Unlike max_minutes it does not shorten the plan: it splits one long run into chunks
    stop_after_minutes: float | None = None
    checkpoint_every: int = 200
    # served weight of the cross-encoder in its pool with the first stage (the folder's fusion_weight):
    # measured best on dev, CLINC150 0.3 and BANKING77 0.0; 1.0 (the paper's pure cross-encoder score)
    # was the worst setting on both (dev answer F1 0.514 / 0.357 vs 0.899 / 0.904 at 0.3)
    fusion_weight: float = 0.3
    # torch intra-op threads on a CPU, at most torch's own count (`faq train reranker` takes it from
    # FAQ_TORCH_THREADS when that is set); None leaves torch's setting
    threads: int | None = 1

    def validate(self) -> None:
        if not 0.0 <= self.fusion_weight <= 1.0:
            raise TrainError(f"fusion_weight must be in [0, 1], got {self.fusion_weight}")
        if self.frozen_layers and not 0 < self.frozen_layers < self.n_layers:
            raise TrainError(f"frozen_layers must be in 0..{self.n_layers - 1}, got {self.frozen_layers}")



def build_phase_a(kb_paths: Sequence[str], pair_paths: Sequence[str], cfg: RerankTrainConfig,
                  embed=None, device: str | None = None) -> tuple[list[LabelledPair], list[LabelledPair], dict]:
    """(train pairs, held-out pairs, per-source counts); `device` runs the default `embed` (MiniLM)."""
    rng = random.Random(cfg.seed)
    train: list[LabelledPair] = []
    heldout: list[LabelledPair] = []
    counts: dict[str, dict[str, int]] = {}
    for path in pair_paths:
        pairs = read_pairs_file(path)
        if "msr-para-test" in str(path) or Path(path).name == "pairs_test.tsv" and "mrpc" in str(path):
            raise TrainError(f"{path}: MRPC test pairs are in STS-B (MSRpar); the STS-B readme forbids training on them")
        rng.shuffle(pairs)
        n_hold = int(len(pairs) * cfg.holdout_fraction)
        heldout += pairs[:n_hold]
        train += pairs[n_hold:]
        counts[str(path)] = {"train": len(pairs) - n_hold, "heldout": n_hold}
    for path in kb_paths:
        groups = kb_groups(read_kb(path))
        source = Path(path).parent.name or Path(path).stem
        both = intent_pairs(groups, cfg.anchors_per_faq, rng, source, embed=embed, device=device)
        rng.shuffle(both)
        n_hold = int(len(both) * cfg.holdout_fraction)
        for pos, neg in both[:n_hold]:
            heldout += [pos, neg]
        for pos, neg in both[n_hold:]:
            train += [pos, neg]
        counts[str(path)] = {"train": 2 * (len(both) - n_hold), "heldout": 2 * n_hold}
    if cfg.augment and cfg.augment_max > 0:
        held_texts = {t for p in heldout for t in (p.q1, p.q2)}
        texts = [t for p in train for t in (p.q1, p.q2) if t not in held_texts]
        aug = augmentation_pairs(texts, cfg.augment_max, rng)
        train += aug
        by_kind: dict[str, int] = {}
        for p in aug:
            by_kind[p.source] = by_kind.get(p.source, 0) + 1
        counts["augment"] = by_kind
    if not train:
        raise TrainError("no phase A training pairs: give --kb and/or --pairs")
    return train, heldout, counts



# ---------------------------------------------------------------------------------------------
# metrics and the trainer
# ---------------------------------------------------------------------------------------------
def pearson_spearman(pred: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    from scipy.stats import pearsonr, spearmanr

    return float(pearsonr(pred, gold)[0]), float(spearmanr(pred, gold)[0])


def _batches(pairs: Sequence[LabelledPair], batch_size: int, seed: int) -> list[list[int]]:
    """Shuffled batches of similar length: shuffle, sort chunks of 50 batches by length, cut, shuffle."""
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    chunk = batch_size * 50
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start:start + chunk], key=lambda i: len(pairs[i].q1) + len(pairs[i].q2))
        batches += [part[j:j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


class RerankTrainer(Trainer):
    """Phase A, then phase B, then calibration and export, on the shared loop's checkpoint, clock and
    interrupt handling; a checkpoint every `checkpoint_every` steps. The budget (`max_minutes`) spans the
    resumed invocations of one run: the checkpoint carries the time spent. `cache_dir`: the model cache
    the base is found in (mpnet; None: models/encoders/mpnet.py's default)."""

    def __init__(self, out: Path, cfg: RerankTrainConfig, train_a: list[LabelledPair], heldout: list[LabelledPair],
                 train_b: list[LabelledPair], dev_b: list[LabelledPair], device: str, resume: bool, meta: dict,
                 cache_dir: str | Path | None = None):
        self.device, self.meta, self.cache_dir = device, meta, cache_dir
        self.train_a, self.heldout, self.train_b, self.dev_b = train_a, heldout, train_b, dev_b
        self.phase = "A"
        self.step_in_epoch = 0
        self.step = 0  # within the phase
        self.planned: dict[str, int] = {}
        super().__init__(out, cfg, resume=resume)

    def build(self, checkpoint: dict | None) -> None:
        from models.matchers.cross_encoder import BASES

        cfg = self.cfg
        self.tokenizer = load_tokenizer(base=cfg.base, cache_dir=self.cache_dir)
        self.model_config = RerankerConfig(n_layers=cfg.n_layers, max_len=cfg.max_len, pooling=cfg.pooling,
                                           sts_head=cfg.sts_head, fusion_weight=cfg.fusion_weight,
                                           base=BASES[cfg.base]["name"])
        self.module = build_module(self.model_config, init_from_base=True, cache_dir=self.cache_dir).to(self.device)
        if cfg.frozen_layers:
            body = self.module.bert
            for part in [body.embeddings, *body.encoder.layer[:cfg.frozen_layers]]:
                part.requires_grad_(False)
        self.optimizer = self._optimizer(cfg.lr_a)
        if checkpoint is not None:
            made = checkpoint["train_config"]
            if (made["n_layers"], made["seed"], made.get("base", "minilm")) != (cfg.n_layers, cfg.seed, cfg.base):
                raise TrainError("--resume: the checkpoint was made with another --base/--layers/--seed")
            self.module.load_state_dict(checkpoint["model"])

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        ck = checkpoint
        self.phase, self.step_in_epoch, self.step, self.planned = ck["phase"], ck["step_in_epoch"], ck["step"], ck["planned"]
        self.clock.elapsed_before, self.clock.cpu_before = ck["elapsed"], ck.get("cpu_seconds", 0.0)
        self.optimizer = self._optimizer(self.cfg.lr_a if self.phase == "A" else self.cfg.lr_b)
        self.optimizer.load_state_dict(ck["optimizer"])
        super().restore(ck)
        log.info("resumed at phase %s epoch %d step %d", self.phase, self.epoch, self.step)

    def checkpoint_state(self) -> dict:
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(), "phase": self.phase,
                "step_in_epoch": self.step_in_epoch, "step": self.step, "planned": self.planned,
                "elapsed": self.clock.elapsed(), "cpu_seconds": self.clock.cpu_seconds()}

    def record(self) -> None:
        """training.json is written once, by `finish` (it holds the calibration and the exports)."""

    def _optimizer(self, lr: float):
        decay, no_decay = [], []
        for _name, p in self.module.named_parameters():
            if not p.requires_grad:
                continue
            (no_decay if p.ndim < 2 else decay).append(p)
        return torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr
        )

    def _tensors(self, pairs: Sequence[LabelledPair], idx: Sequence[int], swap_rng: random.Random | None):
        q1, q2 = [], []
        for i in idx:
            a, b = pairs[i].q1, pairs[i].q2
            if swap_rng is not None and swap_rng.random() < 0.5:  # the relation is symmetric
                a, b = b, a
            q1.append(a)
            q2.append(b)
        enc = encode_pairs(self.tokenizer, q1, q2, self.cfg.max_len)
        t = {k: torch.from_numpy(v).to(self.device) for k, v in enc.items()}
        y = torch.tensor([pairs[i].label for i in idx], dtype=torch.float32, device=self.device)
        return t, y

    def logits(self, pairs: Sequence[LabelledPair], batch_size: int = 128, head: int = 0) -> np.ndarray:
        self.module.eval()
        out = np.zeros(len(pairs), dtype=np.float32)
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i].q1) + len(pairs[i].q2))
        with torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                t, _ = self._tensors(pairs, idx, None)
                out[idx] = self.module(t["input_ids"], t["attention_mask"], t["token_type_ids"])[:, head].float().cpu().numpy()
        self.module.train()
        return out

    def _lr(self, base: float, step: int, planned: int) -> float:
        warm = max(1, int(self.cfg.warmup * planned))
        if step < warm:
            return base * (step + 1) / warm
        return base * max(0.0, (planned - step) / max(1, planned - warm))

    def _phase_b_cost(self) -> float:
        """Cost of a phase B pair in phase A pairs: STS-B pairs are ~1.5x longer, plus the rehearsal pairs."""
        if not self.cfg.sts_head:
            return 1.5
        return 1.5 + (self.cfg.rehearse_batch or self.cfg.batch_b) / self.cfg.batch_b

    def run_phase(self, name: str, pairs: list[LabelledPair], epochs: int, batch: int, base_lr: float, loss_kind: str) -> None:
        from tqdm import tqdm

        batches_per_epoch = len(_batches(pairs, batch, self.cfg.seed))
        full = batches_per_epoch * epochs
        if name == "A":
            self.full_a = full
        if name not in self.planned:
            self.planned[name] = full
        swap_rng = random.Random(self.cfg.seed * 1000 + self.step)
        # phase B rehearsal: phase A batches in their own order, one after every STS-B batch
        rehearse = loss_kind == "mse" and self.cfg.sts_head
        rehearsal = _batches(self.train_a, self.cfg.rehearse_batch or batch, self.cfg.seed + 104729) if rehearse else []
        self.module.train()
        bar = tqdm(total=self.planned[name], initial=self.step, unit="step", desc=f"phase {name}", file=sys.stderr,
                   mininterval=10, dynamic_ncols=True)
        t_phase, steps_timed, ema = time.monotonic(), 0, None
        t_window = t_phase
        windows: list[float] = []  # seconds per step of each timing window in this invocation
        while self.step < self.planned[name] and self.epoch < epochs:
            order = _batches(pairs, batch, self.cfg.seed + 7919 * self.epoch)
            while self.step_in_epoch < len(order) and self.step < self.planned[name]:
                idx = order[self.step_in_epoch]
                for g in self.optimizer.param_groups:
                    g["lr"] = self._lr(base_lr, self.step, self.planned[name])
                t, y = self._tensors(pairs, idx, swap_rng)
                out = self.module(t["input_ids"], t["attention_mask"], t["token_type_ids"])
                if loss_kind == "bce":
                    loss = torch.nn.functional.binary_cross_entropy_with_logits(out[:, 0], y)
                else:
                    loss = torch.nn.functional.mse_loss(torch.sigmoid(out[:, -1]), y)
                if rehearse:
                    ta, ya = self._tensors(self.train_a, rehearsal[self.step % len(rehearsal)], swap_rng)
                    out_a = self.module(ta["input_ids"], ta["attention_mask"], ta["token_type_ids"])
                    loss = loss + torch.nn.functional.binary_cross_entropy_with_logits(out_a[:, 0], ya)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.module.parameters(), 1.0)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                self.step_in_epoch += 1
                steps_timed += 1
                ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
                bar.update(1)
                bar.set_postfix(loss=f"{ema:.4f}", epoch=self.epoch + 1, refresh=False)
                # re-plan with the recent speed: other jobs on the machine come and go
                if name == "A" and (steps_timed == 20 or steps_timed % 100 == 0):
                    window = 20 if steps_timed == 20 else 100
                    windows.append((time.monotonic() - t_window) / window)
                    # the median window: a few minutes of another job on the machine must not cut phase A for good
                    self._plan_phase_a(batch, float(np.median(windows)))
                    t_window = time.monotonic()
                    bar.total = self.planned[name]
                if self.step % self.cfg.checkpoint_every == 0:
                    self.save_checkpoint()
                if self.clock.chunk_over():
                    bar.close()
                    raise TrainingPaused(f"stopped after {self.cfg.stop_after_minutes} minutes at phase {name} step "
                                         f"{self.step} of {self.planned[name]}")
            if self.step_in_epoch >= len(order):
                self.epoch += 1
                self.step_in_epoch = 0
        bar.close()
        self.history.append({"phase": name, "steps": self.step, "planned_steps": self.planned[name],
                             "full_steps": full, "epochs": round(self.step / max(1, batches_per_epoch), 2),
                             "final_loss_ema": ema, "seconds": round(time.monotonic() - t_phase, 1),
                             # measured in this invocation only (a resumed phase started earlier)
                             "s_per_step": (time.monotonic() - t_phase) / steps_timed if steps_timed else None})

    def _plan_phase_a(self, batch_a: int, s_per_step: float) -> None:
        """Fit phase A into the budget next to phase B (STS-B pairs are ~1.5x longer than questions)."""
        remaining = self.clock.remaining_s()
        if remaining is None:
            return
        s_per_pair = s_per_step / batch_a
        phase_b_s = len(self.train_b) * self.cfg.epochs_b * s_per_pair * self._phase_b_cost()
        # evaluations and calibration (a forward pass costs about a quarter of a training pair), export
        reserve = 120 + (len(self.heldout) + len(self.dev_b)) * s_per_pair / 4
        fit = int(max(0.0, remaining - phase_b_s - reserve) / s_per_step) + self.step
        new = max(self.step, min(fit, self.full_a))  # grows back when the machine gets quieter (or the budget larger)
        if new != self.planned["A"]:
            log.info("time budget: phase A planned for %d steps instead of %d (%.2fs/step)", new, self.planned["A"], s_per_step)
            self.planned["A"] = new

    def train(self) -> None:
        cfg = self.cfg
        if self.phase == "A":
            self.run_phase("A", self.train_a, cfg.epochs_a, cfg.batch_a, cfg.lr_a, "bce")
            logits = self.logits(self.heldout)
            labels = np.array([p.label for p in self.heldout])
            acc = float(np.mean((logits >= 0) == (labels >= 0.5))) if len(labels) else None
            self.history.append({"phase": "A", "heldout_accuracy": acc, "heldout_pairs": len(labels)})
            log.info("phase A done: held-out accuracy %s", acc)
            save_reranker(self.module, self.model_config, self.tokenizer, self.out / "phase_a")
            self.phase, self.epoch, self.step_in_epoch, self.step = "B", 0, 0, 0
            self.optimizer = self._optimizer(cfg.lr_b)
            remaining = self.clock.remaining_s()
            speed_a = next((h["s_per_step"] for h in self.history if h.get("s_per_step")), None)
            if remaining is not None and speed_a:
                s_per_step = speed_a * cfg.batch_b / cfg.batch_a * self._phase_b_cost()
                full_b = math.ceil(len(self.train_b) / cfg.batch_b) * cfg.epochs_b
                self.planned["B"] = max(1, min(full_b, int((remaining - 60) / s_per_step)))
            self.save_checkpoint()
        if self.phase == "B":
            self.run_phase("B", self.train_b, cfg.epochs_b, cfg.batch_b, cfg.lr_b, "mse")
            self.phase = "calibrate"
            self.save_checkpoint()

    def finish(self) -> dict:
        sim = sigmoid(self.logits(self.dev_b, head=-1)) if self.dev_b else None
        stsb_dev = pearson_spearman(sim, np.array([p.label for p in self.dev_b])) if sim is not None else None
        logits = self.logits(self.heldout)
        labels = np.array([p.label for p in self.heldout])
        if len(labels) and 0 < labels.sum() < len(labels):
            a, b = fit_platt(logits, labels)
            calibration = {"a": a, "b": b, "source": f"platt on {len(labels)} held-out binary pairs ({HELDOUT_FILE})"}
        else:
            calibration = {"a": 1.0, "b": 0.0, "source": "identity (no held-out binary pairs)"}
        self.model_config.calibration = calibration
        summary = {
            "stsb_dev_pearson": stsb_dev[0] if stsb_dev else None,
            "stsb_dev_spearman": stsb_dev[1] if stsb_dev else None,
            "heldout_accuracy_after_b": float(np.mean((a * logits + b >= 0) == (labels >= 0.5))) if len(labels) else None,
            "calibration": calibration,
            "history": self.history,
            "train_config": asdict(self.cfg),
            "seconds": round(self.clock.elapsed(), 1),
            # wall-clock includes waiting for the CPU on a shared machine; this is the work itself
            "cpu_seconds": round(self.clock.cpu_seconds(), 1),
            **self.meta,
        }
        save_reranker(self.module, self.model_config, self.tokenizer, self.out,
                      extra={"training": {k: summary[k] for k in ("stsb_dev_pearson", "stsb_dev_spearman", "seconds")}})
        written = export_onnx(self.out, quantize=True)
        summary["files"] = {p.name: p.stat().st_size for p in sorted(self.out.iterdir()) if p.is_file()}
        summary["onnx"] = [p.name for p in written]
        write_json_atomic(self.out / self.report_file, summary)
        self.phase = "done"
        self.save_checkpoint()
        return summary



def train_reranker(out: str | Path, kb_paths: Sequence[str] = (), pair_paths: Sequence[str] = (),
                   stsb_dir: str | Path | None = None, cfg: RerankTrainConfig | None = None, resume: bool = False,
                   device: str | None = None, command: str | None = None, embed=None,
                   cache_dir: str | Path | None = None) -> dict:
    """Build the data (or reuse it on --resume), train both phases, calibrate, save, export. `device`
    (None: CUDA when present) runs every model here; `cache_dir` is the model cache the base is found in
    (mpnet; None: var/models): `faq train reranker` passes FAQ_DEVICE and FAQ_MODEL_CACHE."""
    from models.encoders.base import pick_device

    cfg = cfg or RerankTrainConfig()
    cfg.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = pick_device(device)
    if device == "cpu" and cfg.threads:
        torch.set_num_threads(max(1, min(torch.get_num_threads(), cfg.threads)))
    if stsb_dir is None:
        raise TrainError("--stsb DIR (the folder with sts-train.csv / sts-dev.csv) is needed for phase B")
    stsb_dir = Path(stsb_dir)
    for name in ("sts-train.csv", "sts-dev.csv"):
        if not (stsb_dir / name).exists():
            raise TrainError(f"{stsb_dir / name} not found")
    train_b = read_stsb(stsb_dir / "sts-train.csv")
    dev_b = read_stsb(stsb_dir / "sts-dev.csv")
    pairs_file, held_file, meta_file = out / PAIRS_A_FILE, out / HELDOUT_FILE, out / "data.json"
    if resume and pairs_file.exists() and held_file.exists():
        train_a, heldout = read_written_pairs(pairs_file), read_written_pairs(held_file)
        counts = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    else:
        if resume:
            raise TrainError(f"--resume: {pairs_file} missing (the run never got past data preparation)")
        log.info("building phase A pairs ...")
        train_a, heldout, counts = build_phase_a(list(kb_paths), list(pair_paths), cfg, embed=embed, device=device)
        write_pairs(pairs_file, train_a)
        write_pairs(held_file, heldout)
        meta_file.write_text(json.dumps(counts, indent=2) + "\n")
    log.info("phase A: %d pairs (%d held out), phase B: %d STS-B pairs", len(train_a), len(heldout), len(train_b))
    meta = {"command": command, "device": device, "torch_threads": torch.get_num_threads(),
            "data": {"phase_a": counts, "phase_a_pairs": len(train_a), "heldout_pairs": len(heldout),
                     "phase_b_pairs": len(train_b), "stsb_dir": str(stsb_dir)}}
    trainer = RerankTrainer(out, cfg, train_a, heldout, train_b, dev_b, device, resume, meta, cache_dir=cache_dir)
    return trainer.run()
