"""The label gate of a new build, shared by `faq index build` and the console's Build now: a build is made
current only when the KB's labelled queries (the /feedback labels of its query log, plus `--dev` for the
CLI) do not say it matches worse than the current build. Each build is judged as it was built (no delta
segment), so the KB edits since the current one are part of what is judged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

#: labelled queries (with an FAQ) needed before they gate a build
MIN_LABELS = 20
#: a build whose top-1 on the labels is more than this below the current build's is not made current
MAX_DROP = 0.02


@dataclass(frozen=True)
class GateResult:
    n_labels: int
    current: str
    version: str
    before: float  # top-1 of the current build on the labels
    after: float  # ... and of the new one
    max_drop: float

    @property
    def passed(self) -> bool:
        return self.after >= self.before - self.max_drop

    def __str__(self) -> str:
        return (f"labels ({self.n_labels}): top-1 {self.before:.4f} on the current build {self.current}, "
                f"{self.after:.4f} on {self.version}")


class LabelsUnusable(ValueError):
    """A labels file that cannot be read, or that names FAQs the KB does not have."""


def labelled_queries(store: Any, dev: str | None = None, feedback: bool = True,
                     since: Any = None) -> list[tuple[str, str | None]]:
    """Labelled queries from a `dev` file (JSONL/CSV: query, faq_id or null) and the query log's feedback.
    Raises LabelsUnusable saying what is wrong with the file."""
    from kb.records import KbFormatError
    from kb.files import read_queries

    labels: list[tuple[str, str | None]] = []
    if dev:
        try:
            rows = read_queries(dev)
        except (OSError, KbFormatError) as exc:
            raise LabelsUnusable(f"--dev {dev}: {exc}") from exc
        faq_ids = set(store.snapshot().faqs)
        unknown = sorted({q.faq_id for q in rows if q.faq_id is not None and q.faq_id not in faq_ids})
        if unknown:
            raise LabelsUnusable(f"--dev {dev}: {len(unknown)} faq_id(s) not in the KB, e.g. {', '.join(unknown[:5])}")
        labels += [(q.query, q.faq_id) for q in rows]
    if feedback:
        labels += feedback_labels_of(store, since)
    return labels


def feedback_labels_of(store: Any, since: Any = None) -> list[tuple[str, str | None]]:
    """The query log's /feedback labels naming FAQs the KB still has (or none: out of scope)."""
    from app.release.labels import feedback_labels

    faq_ids = set(store.snapshot().faqs)
    return [(q, f) for q, f in feedback_labels(store.read_query_log(since, with_feedback=True))
            if f is None or f in faq_ids]


def top1_on(settings: Any, encoder: Any, registry: Any, version: str, labels: Sequence[tuple[str, str | None]]) -> float:
    from index.retriever import Retriever

    return top1_of(settings, encoder, Retriever.load(registry.path(version)).as_built(), labels)


def top1_of(settings: Any, encoder: Any, retriever: Any, labels: Sequence[tuple[str, str | None]]) -> float:
    """Top-1 on `labels` of the KB `retriever` serves, scored as serving scores."""
    from app.match.assembly import build_pipeline, served_model_path
    from app.release.labels import label_scores, labelled_rows
    from index.decision import load_model

    first = build_pipeline(settings.model_copy(update={"scoring": "calibration"}), encoder, retriever, cache_size=0)
    rows, ref = labelled_rows(first, retriever, labels)
    model = load_model(served_model_path(settings))
    return label_scores(model, rows, ref)["top1"]


def judge(settings: Any, encoder: Any, registry: Any, version: str, labels: Sequence[tuple[str, str | None]],
          min_labels: int = MIN_LABELS, max_drop: float = MAX_DROP) -> GateResult | None:
    """How `version` and the current build do on `labels`; None when there is nothing to compare (no
    current build, or fewer than `min_labels` labels naming an FAQ). Raises whatever scoring raises
    (e.g. a current build of another encoder: the caller decides)."""
    current = registry.current()
    n = sum(f is not None for _, f in labels)
    if current is None or current == version or n < min_labels:
        return None
    before = top1_on(settings, encoder, registry, current, labels)
    after = top1_on(settings, encoder, registry, version, labels)
    return GateResult(len(labels), current, version, before, after, max_drop)


def content_gate(settings: Any, encoder: Any, retriever: Any, labels: Sequence[tuple[str, str | None]],
                 min_labels: int = MIN_LABELS, max_drop: float = MAX_DROP) -> Any:
    """The label gate of a publication (app/release/publishing.py `publish`): `gate(before, after)` scores the
    KB's labels on the served build with each content applied (what production answers now, and would after);
    None when there is no earlier publication or too few labels naming an FAQ."""
    from app.store.publications import content_snapshot

    def gate(before: dict | None, after: dict) -> GateResult | None:
        if before is None or sum(f is not None for _, f in labels) < min_labels:
            return None
        then = top1_of(settings, encoder, retriever.with_kb(content_snapshot(before, 0), encoder), labels)
        now = top1_of(settings, encoder, retriever.with_kb(content_snapshot(after, 0), encoder), labels)
        return GateResult(len(labels), "published", "draft", then, now, max_drop)

    return gate
