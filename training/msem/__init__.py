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

Modules: `data` (config, files -> TrainData), `warm_start` (--config, --init), `trainer` (MsemTrainer on
training/loop.py, `train_msem`), `selection` (fusion weight, fine-tuned or base). The names other
packages use are importable from here.
"""
from training.loop import CHECKPOINT_FILE, TRAINING_FILE, TrainError
from training.msem.data import TrainConfig, TrainData, prepare_data, read_dev_queries
from training.msem.selection import (
    FUSION_GRID,
    SELECTION_FILE,
    read_selection,
    retrieval_top1,
    select_model,
    tune_fusion,
)
from training.msem.trainer import MsemTrainer, model_readme, train_msem
from training.msem.warm_start import (
    ARCHITECTURE_FIELDS,
    extend_vocabulary,
    parse_config_overrides,
    reconfigure_heads,
)

__all__ = [
    "ARCHITECTURE_FIELDS", "CHECKPOINT_FILE", "FUSION_GRID", "SELECTION_FILE", "TRAINING_FILE", "MsemTrainer",
    "TrainConfig", "TrainData", "TrainError", "extend_vocabulary", "model_readme", "parse_config_overrides",
    "prepare_data", "read_dev_queries", "read_selection", "reconfigure_heads", "retrieval_top1", "select_model",
    "train_msem", "tune_fusion",
]
