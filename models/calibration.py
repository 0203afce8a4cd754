"""Platt calibration: p = sigmoid(a * x + b), a score x (a cosine, a matcher's raw score or logit) -> a
probability. One class for every curve of the project, in the two JSON forms they are stored in:

- `to_dict` / `from_dict`: {"a", "b", "source"}, a build manifest's curves (index/calibration.py: `source`
  "kb_fit" | "encoder" | "default") and a cross-encoder folder's config.json `calibration`;
- `write_calibration` / `read_calibration`: a matcher folder's `calibration.json` (MMAICM, analogy, Siamese):
  {"a", "b", "fitted_on", "n_pairs", "fusion_weight", "extra"} (the dataclass's fields), fitted on dev
  pairs at the end of training.

The fits themselves are models/scoring.py `fit_platt`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from models.folder import write_json
from models.scoring import sigmoid

CALIBRATION_FILE = "calibration.json"


@dataclass(init=False)
class Calibration:
    """p = sigmoid(a * x + b); the identity curve (a = 1, b = 0) until fitted.

    Where the curve came from is one field under the two names its files use: `source` in build manifests
    and cross-encoder configs ("kb_fit" | "encoder" | "default" for a build's curve, "manifest" when read
    back), `fitted_on` in a matcher folder's calibration.json ("dev", ...). The dataclass fields are the
    folder file's, in its order (trainers write `dataclasses.asdict` of it into training.json too)."""

    a: float
    b: float
    #: where the curve came from (also readable as `source`)
    fitted_on: str | None
    #: a matcher folder's: how many dev pairs the curve was fitted on
    n_pairs: int
    #: a matcher folder's: the re-ranking stage's default share against the first stage (FAQ_RERANK_WEIGHT-like)
    fusion_weight: float
    extra: dict

    def __init__(self, a: float = 1.0, b: float = 0.0, fitted_on: str | None = None, n_pairs: int = 0,
                 fusion_weight: float = 0.5, extra: dict | None = None, *, source: str | None = None):
        if source is not None and fitted_on is not None and source != fitted_on:
            raise ValueError(f"source {source!r} and fitted_on {fitted_on!r} name the same field")
        self.a, self.b = a, b
        self.fitted_on = fitted_on if source is None else source
        self.n_pairs, self.fusion_weight = n_pairs, fusion_weight
        self.extra = {} if extra is None else extra

    @property
    def source(self) -> str | None:
        return self.fitted_on

    def prob(self, x: np.ndarray | float) -> np.ndarray:
        """Probabilities of scores `x`, float64."""
        return sigmoid(self.a * np.asarray(x, dtype=np.float64) + self.b)

    def probability(self, x: float) -> float:
        return float(self.prob(x))

    def to_dict(self) -> dict[str, Any]:
        """{"a", "b", "source"}: a curve as build manifests (a `prior`) and cross-encoder configs hold it."""
        return {"a": self.a, "b": self.b, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Calibration":
        """A {"a", "b"(, "source")} curve; a missing a or b is the identity's."""
        d = d or {}
        return cls(float(d.get("a", 1.0)), float(d.get("b", 0.0)), source=d.get("source"))


#: the fields of a matcher folder's calibration.json, in the order they are written
FOLDER_FIELDS = tuple(f.name for f in fields(Calibration))


def write_calibration(directory: str | Path, calibration: Calibration) -> None:
    write_json(Path(directory) / CALIBRATION_FILE, asdict(calibration))


def read_calibration(directory: str | Path) -> Calibration:
    """A matcher folder's calibration.json; the identity curve when the folder has none."""
    path = Path(directory) / CALIBRATION_FILE
    if not path.exists():
        return Calibration()
    meta = json.loads(path.read_text(encoding="utf-8"))
    unknown = sorted(set(meta) - set(FOLDER_FIELDS))
    if unknown:
        raise ValueError(f"{path}: unknown calibration fields {unknown}")
    return Calibration(**meta)
