"""The training loop every trainer subclasses (training/loop.py), on a tiny real torch model: a resumed run
ends where an uninterrupted one does, patience stops (higher or lower better), the time budget cuts an
epoch and leaves a checkpoint to resume, Ctrl-C and a finished chunk leave one too, bad input is a
TrainError."""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Any, Mapping

import pytest
import torch

from training.loop import CHECKPOINT_FILE, TRAINING_FILE, TrainError, Trainer, TrainingPaused

torch.set_num_threads(1)

g = torch.Generator().manual_seed(0)
X = torch.randn(96, 4, generator=g)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(96, 1, generator=g)
X_DEV, Y_DEV = X[:32] + 0.05, Y[:32]


@dataclass
class ToyConfig:
    epochs: int = 6
    patience: int = 2
    seed: int = 0
    lr: float = 0.005
    max_minutes: float | None = None
    stop_after_minutes: float | None = None
    batch_size: int = 8
    batch_sleep_s: float = 0.0  # makes an epoch slow enough for the time budget to cut it

    def validate(self) -> None:
        if self.epochs < 1:
            raise TrainError(f"epochs must be >= 1, got {self.epochs}")


class ToyTrainer(Trainer):
    """Linear regression through a dropout layer; its batches come in an order drawn from torch's global
    RNG and a learning-rate jitter from Python's, so a resume that lost an RNG state would diverge."""

    def __init__(self, out_dir, cfg: ToyConfig, resume: bool = False, interrupt_at: int | None = None):
        self.interrupt_at = interrupt_at
        super().__init__(out_dir, cfg, resume=resume, command="test")

    def build(self, checkpoint: dict | None) -> None:
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
        if checkpoint is not None:
            self.model.load_state_dict(checkpoint["model"])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.cfg.lr, momentum=0.9)

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        super().restore(checkpoint)

    def checkpoint_state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def train_epoch(self) -> dict:
        if self.epoch + 1 == self.interrupt_at:
            raise KeyboardInterrupt
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr * (0.5 + random.random())
        order = torch.randperm(len(X))
        total, n = 0.0, 0
        for idx in self.in_time(order[s:s + self.cfg.batch_size] for s in range(0, len(X), self.cfg.batch_size)):
            time.sleep(self.cfg.batch_sleep_s)
            loss = torch.nn.functional.mse_loss(self.model(X[idx]), Y[idx])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach()) * len(idx)
            n += len(idx)
        return {"loss": total / max(n, 1), "rows": n, "partial": self.partial}

    def dev_mse(self) -> float:
        self.model.eval()
        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(self.model(X_DEV), Y_DEV))

    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        return "neg_dev_mse", -self.dev_mse()

    def save_best(self) -> None:
        torch.save(self.model.state_dict(), self.out / "best.pt")


class LowerIsBetter(ToyTrainer):
    higher_is_better = False

    def evaluate(self, stats: Mapping[str, Any]) -> tuple[str, float]:
        return "dev_mse", self.dev_mse()


def weights(trainer: Trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def metrics(summary: dict) -> list[tuple[int, float, bool]]:
    return [(row["epoch"], row["metric"], row["best"]) for row in summary["history"]]


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    straight = ToyTrainer(tmp_path / "straight", ToyConfig(epochs=6, patience=10))
    whole = straight.run()
    assert whole["epochs_done"] == 6 and whole["stop_reason"] == "reached --epochs 6"
    first = ToyTrainer(tmp_path / "cut", ToyConfig(epochs=3, patience=10)).run()
    assert first["epochs_done"] == 3
    resumed = ToyTrainer(tmp_path / "cut", ToyConfig(epochs=6, patience=10), resume=True)
    assert resumed.epoch == 3 and len(resumed.history) == 3
    again = resumed.run()
    assert metrics(again) == metrics(whole)
    assert again["best_epoch"] == whole["best_epoch"] and again["best_metric"] == whole["best_metric"]
    assert torch.equal(weights(resumed), weights(straight))
    assert torch.equal(torch.load(tmp_path / "cut" / "best.pt")["0.weight"],
                       torch.load(tmp_path / "straight" / "best.pt")["0.weight"])
    record = json.loads((tmp_path / "cut" / TRAINING_FILE).read_text())
    assert record["epochs_done"] == 6 and record["command"] == "test"
    # a finished run resumed with nothing left to do stops at once and keeps its history
    done = ToyTrainer(tmp_path / "cut", ToyConfig(epochs=6, patience=10), resume=True)
    assert metrics(done.run()) == metrics(whole) and done.stop_kind == "trained"


@pytest.mark.parametrize("trainer", [ToyTrainer, LowerIsBetter])
def test_patience_stops_a_stalled_run(tmp_path, trainer):
    stalled = trainer(tmp_path / "stalled", ToyConfig(epochs=20, patience=3, lr=0.0))  # nothing moves
    summary = stalled.run()
    assert stalled.stop_kind == "patience" and summary["epochs_done"] == 4  # the first epoch is the best
    assert summary["best_epoch"] == 1 and [r["best"] for r in summary["history"]] == [True, False, False, False]
    assert summary["stop_reason"] == f"early stop: dev {summary['metric']} did not improve for 3 epochs"
    learning = trainer(tmp_path / "learning", ToyConfig(epochs=4, patience=3))
    summary = learning.run()
    assert learning.stop_kind == "epochs" and summary["best_epoch"] == 4
    values = [r["metric"] for r in summary["history"]]
    assert values == sorted(values, reverse=not trainer.higher_is_better)  # improving each epoch


def test_the_time_budget_cuts_an_epoch_and_leaves_a_checkpoint_to_resume(tmp_path):
    slow = ToyConfig(epochs=3, patience=1, max_minutes=0.3 / 60, batch_sleep_s=0.05)  # 12 batches: 0.6 s an epoch
    trainer = ToyTrainer(tmp_path / "m", slow)
    summary = trainer.run()
    assert trainer.stop_kind == "budget" and summary["stop_reason"] == f"time budget of {slow.max_minutes} minutes reached"
    (row,) = summary["history"]
    assert row["partial"] and 0 < row["rows"] < len(X)
    checkpoint = torch.load(tmp_path / "m" / CHECKPOINT_FILE, weights_only=False)
    assert checkpoint["epoch"] == 1 and checkpoint["bad_epochs"] == 0  # a cut epoch is no stall
    resumed = ToyTrainer(tmp_path / "m", ToyConfig(epochs=3, patience=1), resume=True)
    summary = resumed.run()
    assert resumed.stop_kind in ("epochs", "patience") and [r["epoch"] for r in summary["history"]][:2] == [1, 2]


def test_keyboard_interrupt_leaves_a_checkpoint_and_resume_finishes_the_same_run(tmp_path):
    """Ctrl-C between epochs: the checkpoint is the end of the last epoch, so the resumed run is the
    uninterrupted one."""
    whole = ToyTrainer(tmp_path / "straight", ToyConfig(epochs=5, patience=10)).run()
    with pytest.raises(KeyboardInterrupt):
        ToyTrainer(tmp_path / "m", ToyConfig(epochs=5, patience=10), interrupt_at=3).run()
    assert torch.load(tmp_path / "m" / CHECKPOINT_FILE, weights_only=False)["epoch"] == 2
    assert json.loads((tmp_path / "m" / TRAINING_FILE).read_text())["stop_reason"] == "interrupted"
    assert metrics(ToyTrainer(tmp_path / "m", ToyConfig(epochs=5, patience=10), resume=True).run()) == metrics(whole)


def test_a_finished_chunk_pauses_with_a_checkpoint_that_resumes(tmp_path):
    """The epoch loop checkpoints whole epochs: a pause (like Ctrl-C) in epoch e resumes at epoch e."""
    chunk = ToyConfig(epochs=3, patience=10, stop_after_minutes=1e-6)
    with pytest.raises(TrainingPaused, match="in epoch 1"):
        ToyTrainer(tmp_path / "m", chunk).run()
    assert torch.load(tmp_path / "m" / CHECKPOINT_FILE, weights_only=False)["epoch"] == 0
    summary = ToyTrainer(tmp_path / "m", ToyConfig(epochs=3, patience=10), resume=True).run()
    assert [r["epoch"] for r in summary["history"]] == [1, 2, 3] and summary["stop_reason"] == "reached --epochs 3"


def test_bad_input_is_a_train_error(tmp_path):
    with pytest.raises(TrainError, match="epochs must be >= 1"):
        ToyTrainer(tmp_path / "m", ToyConfig(epochs=0))
    with pytest.raises(TrainError, match="--resume: no checkpoint at"):
        ToyTrainer(tmp_path / "m", ToyConfig(), resume=True)
    ToyTrainer(tmp_path / "m", ToyConfig(epochs=1)).run()
    checkpoint = torch.load(tmp_path / "m" / CHECKPOINT_FILE, weights_only=False)
    del checkpoint["bad_epochs"]
    torch.save(checkpoint, tmp_path / "m" / CHECKPOINT_FILE)
    with pytest.raises(TrainError, match="lacks 'bad_epochs'"):
        ToyTrainer(tmp_path / "m", ToyConfig(), resume=True)
