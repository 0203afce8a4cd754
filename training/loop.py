"""The training loop every trainer under training/ subclasses (`Trainer`).

The shared machinery: one `TrainError` for bad input, seeding, `--resume` from `checkpoint.pt` (model,
optimiser, epoch, best metric, stalled epochs, history, RNG states), atomic checkpoint and report writes,
the epoch loop with patience on a dev metric (higher or lower is better), the time budget (`max_minutes`:
the epoch in progress is cut short, the run stops with a checkpoint; `stop_after_minutes`: this invocation
pauses with a checkpoint, `TrainingPaused`, and `--resume` goes on), Ctrl-C (a checkpoint, then the
interrupt goes on up), one progress line per epoch and the run's record (`training.json`).

A trainer implements `build` (model and optimiser, from a checkpoint on --resume), `checkpoint_state`,
`train_epoch` (its batches through `in_time`), `evaluate`, `save_best` and usually `summary` and `finish`
(calibration, export); a trainer that is not a sequence of epochs (the cross-encoder's two phases)
overrides `train` and keeps the rest.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, TypeVar

import numpy as np
import torch

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
TRAINING_FILE = "training.json"

T = TypeVar("T")


class TrainError(ValueError):
    """Bad training input: no data, an unreadable file, an unknown or out-of-range config field, a
    checkpoint that does not fit the run."""


def config_overrides(value: str | Mapping[str, Any] | None, config_cls: Any) -> dict[str, Any]:
    """`--config`: a JSON object, or the path of a file holding one -> fields of `config_cls` (a dataclass with
    `field_names()`); anything else, and unknown fields, is a TrainError naming the problem."""
    if not value:
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
            raise TrainError(f"--config must be a JSON object of {config_cls.__name__} fields")
    unknown = sorted(set(overrides) - config_cls.field_names())
    if unknown:
        raise TrainError(f"--config: unknown {config_cls.__name__} fields {unknown}")
    return overrides


class TrainingPaused(Exception):
    """`stop_after_minutes` reached: a checkpoint is saved, `--resume` continues."""


# ---------------------------------------------------------------------------------------------
# seeds, RNG states, atomic writes


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_atomic(obj: Any, path: Path) -> None:
    """torch.save through a temporary file: a run killed while writing keeps the previous checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def write_json_atomic(path: Path, record: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class Clock:
    """Wall clock of one invocation: the run's budget (`max_minutes`; a trainer whose budget spans its
    resumed invocations sets `elapsed_before` from its checkpoint) and this invocation's chunk
    (`stop_after_minutes`)."""

    def __init__(self, max_minutes: float | None = None, stop_after_minutes: float | None = None):
        self.max_minutes = max_minutes
        self.stop_after_minutes = stop_after_minutes
        self.elapsed_before = 0.0  # seconds of earlier invocations counted against the budget
        self.cpu_before = 0.0
        self.start()

    def start(self) -> None:
        self.t_start = time.monotonic()
        self.cpu_start = time.process_time()

    def elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.t_start

    def cpu_seconds(self) -> float:
        # wall-clock includes waiting for the CPU on a shared machine; this is the work itself
        return self.cpu_before + time.process_time() - self.cpu_start

    def remaining_s(self) -> float | None:
        if not self.max_minutes:
            return None
        return self.max_minutes * 60 - self.elapsed()

    def out_of_time(self) -> bool:
        remaining = self.remaining_s()
        return remaining is not None and remaining < 0

    def chunk_over(self) -> bool:
        return bool(self.stop_after_minutes) and time.monotonic() - self.t_start >= self.stop_after_minutes * 60


# ---------------------------------------------------------------------------------------------
# the loop


class Trainer:
    """One training run into `out_dir`; `run()` returns the summary written to `report_file`.

    `cfg` is the trainer's config dataclass: `seed`, `max_minutes`, `validate()` (raising TrainError) and,
    for the epoch loop, `epochs` and `patience`; `stop_after_minutes` when it has one. A subclass sets its
    own attributes, then calls `super().__init__`, which validates, seeds, and calls `build` (and `restore`
    on --resume)."""

    checkpoint_file = CHECKPOINT_FILE
    report_file = TRAINING_FILE
    higher_is_better = True
    #: an improvement smaller than this counts as none
    min_delta = 0.0

    def __init__(self, out_dir: str | Path, cfg: Any, *, resume: bool = False, command: str | None = None):
        cfg.validate()
        self.cfg = cfg
        self.out = Path(out_dir)
        self.command = command or " ".join(shlex.quote(a) for a in sys.argv)
        self.epoch = 0  # completed epochs
        self.best_metric = -math.inf if self.higher_is_better else math.inf
        self.best_epoch = 0
        self.bad_epochs = 0  # epochs since the last improvement
        self.history: list[dict] = []
        self.metric_name: str | None = None  # the last epoch's metric and its value
        self.metric = math.nan
        self.stop_kind: str | None = None  # trained | epochs | budget | patience | interrupted | paused
        self.stop_reason: str | None = None
        self.partial = False  # the epoch in progress was cut short by the time budget
        self.batches_done = 0
        self.clock = Clock(cfg.max_minutes, getattr(cfg, "stop_after_minutes", None))
        self.out.mkdir(parents=True, exist_ok=True)
        seed_everything(cfg.seed)
        checkpoint = self.read_checkpoint() if resume else None
        self.build(checkpoint)
        if checkpoint is not None:
            self.restore(checkpoint)

    # ---- hooks ------------------------------------------------------------------------------------
    def build(self, checkpoint: dict | None) -> None:
        """The model and optimiser (weights from `checkpoint` on --resume; its optimiser state and the
        loop's come in `restore`)."""
        raise NotImplementedError

    def checkpoint_state(self) -> dict:
        """What the trainer adds to checkpoint.pt (model, optimiser, ...)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Before the first epoch (caches, the opening log line)."""

    def train_epoch(self) -> dict:
        """Epoch `self.epoch + 1`: draw its data, train its batches (through `in_time`); the stats
        recorded for it."""
        raise NotImplementedError

    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        """(metric name, value) after an epoch: the dev metric patience and the best epoch follow."""
        raise NotImplementedError

    def save_best(self) -> None:
        """The model now is the best so far: save it as the output model."""
        raise NotImplementedError

    def epoch_row(self, stats: Mapping[str, Any], improved: bool, eval_s: float, epoch_s: float) -> dict:
        """The epoch's line of the history."""
        return {"epoch": self.epoch, "metric_name": self.metric_name, "metric": self.metric, "best": improved,
                "eval_s": round(eval_s, 3), "epoch_s": round(epoch_s, 3), **stats}

    def progress_line(self, row: Mapping[str, Any]) -> str:
        return f"epoch {self.epoch}: {self.metric_name} {self.metric:.4f}{' *best*' if row['best'] else ''}"

    def on_stall(self) -> str | None:
        """After an epoch that did not improve (and was not cut short): "patience" to stop, else None."""
        return "patience" if self.bad_epochs >= self.cfg.patience else None

    def stop_message(self, kind: str) -> str:
        cfg = self.cfg
        return {
            "trained": f"already trained {self.epoch} epochs (--epochs {cfg.epochs})",
            "epochs": f"reached --epochs {cfg.epochs}",
            "budget": f"time budget of {cfg.max_minutes} minutes reached",
            "patience": f"early stop: dev {self.metric_name} did not improve for {cfg.patience} epochs",
            "interrupted": "interrupted",
        }[kind]

    def summary(self) -> dict:
        return {
            "command": self.command,
            "train_config": asdict(self.cfg),
            "epochs_done": self.epoch,
            "best_epoch": self.best_epoch,
            "best_metric": None if math.isinf(self.best_metric) else self.best_metric,
            "metric": self.history[-1].get("metric_name") if self.history else None,
            "stop_reason": self.stop_reason,
            "history": self.history,
        }

    def record(self) -> None:
        """The run's record so far, after every epoch and when interrupted."""
        self.write_report()

    def finish(self) -> dict:
        """After the loop (calibration, export, ...): the final summary."""
        return self.write_report()

    # ---- checkpoint -------------------------------------------------------------------------------
    def read_checkpoint(self) -> dict:
        path = self.out / self.checkpoint_file
        if not path.is_file():
            raise TrainError(f"--resume: no checkpoint at {path}")
        return torch.load(path, map_location="cpu", weights_only=False)

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        """The loop's state and the RNG states from `checkpoint` (a subclass restores its optimiser and
        the rest of its own state, then calls this)."""
        try:
            self.epoch = checkpoint["epoch"]
            self.best_metric = checkpoint["best_metric"]
            self.best_epoch = checkpoint["best_epoch"]
            self.bad_epochs = checkpoint["bad_epochs"]
            self.history = checkpoint["history"]
            set_rng_state(checkpoint["rng"])
        except KeyError as exc:
            raise TrainError(f"--resume: {self.out / self.checkpoint_file} lacks {exc} (written by an older "
                             f"version: start the run again without --resume)") from exc

    def save_checkpoint(self) -> None:
        """checkpoint.pt, written atomically."""
        save_atomic({
            **self.checkpoint_state(),
            "epoch": self.epoch,
            "best_metric": self.best_metric,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "history": self.history,
            "rng": rng_state(),
            "train_config": asdict(self.cfg),
        }, self.out / self.checkpoint_file)

    def write_report(self, extra: Mapping[str, Any] | None = None) -> dict:
        summary = {**self.summary(), **(extra or {})}
        write_json_atomic(self.out / self.report_file, summary)
        return summary

    # ---- time -------------------------------------------------------------------------------------
    def in_time(self, batches: Iterable[T]) -> Iterator[T]:
        """The epoch's batches while the time budget lasts (when it is spent, `self.partial` and the
        epoch ends); a finished chunk (`stop_after_minutes`) raises TrainingPaused."""
        for batch in batches:
            if self.clock.chunk_over():
                raise TrainingPaused(f"stopped after {self.clock.stop_after_minutes} minutes in epoch {self.epoch + 1}")
            if self.clock.out_of_time():
                self.partial = True
                return
            self.batches_done += 1
            yield batch

    def progress(self, total: int, unit: str) -> Any:
        """The epoch's progress bar on stderr."""
        from tqdm import tqdm

        return tqdm(total=total, unit=unit, desc=f"epoch {self.epoch + 1}", file=sys.stderr, leave=False,
                    mininterval=1.0)

    # ---- the run ----------------------------------------------------------------------------------
    def stop(self, kind: str, reason: str | None = None) -> None:
        self.stop_kind = kind
        self.stop_reason = reason if reason is not None else self.stop_message(kind)

    def improves(self, metric: float) -> bool:
        if self.higher_is_better:
            return metric > self.best_metric + self.min_delta
        return metric < self.best_metric - self.min_delta

    def run(self) -> dict:
        self.clock.start()
        self.prepare()
        try:
            self.train()
        except (KeyboardInterrupt, TrainingPaused) as exc:
            # keep what was learned: the checkpoint holds the last completed epoch (the cross-encoder:
            # the last step), so --resume redoes only the interrupted part
            if isinstance(exc, KeyboardInterrupt):
                self.stop("interrupted")
            else:
                self.stop("paused", str(exc))
            log.warning("%s: saving a checkpoint to %s (continue with --resume)", str(exc) or "interrupted",
                        self.out / self.checkpoint_file)
            self.save_checkpoint()
            self.record()
            raise
        return self.finish()

    def train(self) -> None:
        """Epochs until `cfg.epochs`, patience or the time budget; the best epoch is saved as it comes."""
        cfg = self.cfg
        if self.epoch >= cfg.epochs:
            self.stop("trained")
        while self.stop_reason is None and self.epoch < cfg.epochs:
            if self.clock.out_of_time():
                self.stop("budget")
                break
            t_epoch = time.perf_counter()
            self.partial, self.batches_done = False, 0
            stats = self.train_epoch()
            if self.partial and not self.batches_done:  # the budget was spent before the epoch's first batch
                self.stop("budget")
                break
            t = time.perf_counter()
            self.metric_name, self.metric = self.evaluate(stats)
            eval_s = time.perf_counter() - t
            self.epoch += 1
            improved = self.improves(self.metric)
            if improved:
                self.best_metric, self.best_epoch, self.bad_epochs = self.metric, self.epoch, 0
                self.save_best()
            elif not self.partial:  # an epoch cut short by the time budget is not a stall
                self.bad_epochs += 1
            row = self.epoch_row(stats, improved, eval_s, time.perf_counter() - t_epoch)
            self.history.append(row)
            log.info("%s%s", self.progress_line(row), " (partial: time budget)" if self.partial else "")
            if not improved and not self.partial and (kind := self.on_stall()) is not None:
                self.stop(kind)
            if self.partial or self.clock.out_of_time():
                self.stop("budget")
            self.save_checkpoint()
            self.record()
        if self.stop_reason is None:
            self.stop("epochs")
