"""Refitting the decision model on one KB's own labels (`faq index calibrate`): the cross-KB model pulled toward
the labels (index/decision.py `refit`), and the single configured re-ranking stage stacked with it. The model
is written into the KB's folder and served from the service's next start.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence


@dataclass
class Refit:
    """A model refitted on labels, with the 5-fold comparison of `fit_on_labels` and what stacking needs."""

    model: Any
    report: dict
    rows: list
    matches: list
    ref: Any
    retriever: Any


def refit_on_labels(settings: Any, store: Any, registry: Any, version: str, labels: Sequence[tuple[str, str | None]],
                    strength: float) -> Refit:
    """Score `labels` against build `version` and refit the served prior on them. Raises ValueError when they
    cannot be fitted."""
    from app.match.assembly import build_pipeline, load_configured_encoder
    from app.release.labels import fit_on_labels, labelled_rows
    from index.decision import load_model
    from index.retriever import Retriever

    manifest = registry.read_manifest(version)
    encoder = load_configured_encoder(settings, manifest)
    retriever = Retriever.load(registry.path(version)).with_kb(store.snapshot(), encoder)
    first = build_pipeline(settings.model_copy(update={"scoring": "calibration"}), encoder, retriever, cache_size=0)
    matches: list = []
    rows, ref = labelled_rows(first, retriever, labels, matches=matches)
    prior = load_model(settings.decision_model)  # FAQ_DECISION_MODEL, else the shipped cross-KB model
    model, report = fit_on_labels(prior, rows, ref, strength)
    return Refit(model, report, rows, matches, ref, retriever)


def fit_stage(settings: Any, refit: Refit, say: Callable[[str], None]) -> tuple[str, tuple, int] | None:
    """The single configured stage's score stacked with the refitted model on the labelled rows, recorded in
    the model -> (stage id, coefficients, candidates used); None with several stages, which stay pooled as configured. Raises
    OSError / ValueError when FAQ_RERANKER cannot be loaded."""
    import copy

    import numpy as np

    from models.scoring import fit_stack
    from app.stages import load_stages
    from index.decision import WINDOW, decide

    stages = load_stages(settings)
    if len(stages) != 1:
        say(f"  {len(stages)} stages configured: stacking takes one; they stay pooled as configured")
        return None
    stage = copy.copy(stages[0])
    stage.weight = 1.0
    if hasattr(stage, "on_build"):
        stage = stage.on_build(refit.retriever)
    p_s, p_m, right = [], [], []
    for (text, cands, gold, words), found in zip(refit.rows, refit.matches):
        head = found[:WINDOW]
        if not head:
            continue
        p_m += decide(refit.model, text, cands[:WINDOW], refit.ref, words).tolist()
        p_s += np.asarray(stage.rescore(text, head), dtype=np.float64).tolist()
        right += [m.faq_id == gold for m in head]
    coefs = fit_stack(np.array(p_s), np.array(p_m), np.array(right))
    refit.model.meta["stages"] = {stages[0].id: [round(c, 6) for c in coefs]}
    return stages[0].id, coefs, len(right)


def save_refit(refit: Refit, version: str, target: Path) -> None:
    """Write the refitted model, with when, on which build and how it cross-validated."""
    refit.model.meta.update(fitted_at=datetime.now().isoformat(timespec="seconds"), build=version,
                            cross_validated=refit.report)
    target.parent.mkdir(parents=True, exist_ok=True)
    refit.model.save(target)
