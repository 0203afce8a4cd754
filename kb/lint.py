"""KB lint: FAQs whose answer does not fit their phrasings, ranked, each with its reasons and numbers.

An answer pasted under the wrong FAQ, cut off, or left as a placeholder is served with the confidence
of its phrasings' match: the matcher cannot tell. The lint looks at the KB itself instead:

- **answer fit** (needs an encoder): `F[i, j]` = mean cosine of FAQ i's phrasings with FAQ j's answer.
  Three numbers per FAQ, each as a robust z-score against the whole KB (median / MAD), so one threshold
  holds for encoders whose cosines live on different scales (MiniLM, mpnet, MSEM): the own fit
  `F[i, i]`, the row margin (own answer vs the best other answer for these phrasings) and the column
  margin (own phrasings vs the best other FAQ's phrasings for this answer). A swapped answer scores
  low on all three, and the column names the FAQ it was taken from.
- **analogy** (needs an encoder, reported, not scored): the other FAQs are prototype pairs; the
  (phrasings - answer) difference vector of a FAQ is compared with those of its `prototypes` nearest
  FAQs and the best cosine kept (best-of-k, after the analogy paper). On sentence embeddings that were
  not trained for analogies it separates swapped answers far less well than the fit signals
  (docs/results.md, "KB lint"), so it is in the JSON for inspection but adds nothing to the score.
- **structure** (no encoder): missing answer (empty or a placeholder, `is_placeholder`), truncated
  answer (no sentence-final punctuation in a KB whose answers mostly have it, or far shorter than the
  KB's answers), the same answer under several FAQs, the same phrasing under several FAQs.

Each signal gives a score in [0, 1]; a FAQ's score is their noisy-OR, 1 - prod(1 - s), so one strong
signal flags on its own and weak ones add up. `DEFAULT_THRESHOLD` flags no FAQ of the demo KB with
either base encoder (measured: evaluation/kb_lint.py).

The encoder is passed in (anything with `id` and `encode(texts, batch_size=, show_progress_bar=)` ->
L2-normalised rows, as models/ has them), and so is how texts are batched into it (`encode=`), so the
lint lives with the KB and imports nothing above it.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kb.records import KbRecord, is_placeholder, kb_groups, normalize_question

DEFAULT_THRESHOLD = 0.5
#: prototype pairs per FAQ for the analogy signal (the paper's best p was 30)
DEFAULT_PROTOTYPES = 30
#: the fit signals need a KB to be relative to; below this many FAQs with real answers they are skipped
MIN_FAQS_FOR_FIT = 5
#: fit score = sigmoid((-z - FIT_Z_CENTER) / FIT_Z_SCALE) of the mean robust z of the three fit numbers.
#: With MiniLM the lowest z of an untouched FAQ was -2.0 on the demo KB and -2.3 on Brightwater
#: (evaluation/data/energy), while swapped answers had a median near -4.5; the mean of the three beat
#: the margins alone or their minimum on both KBs (recall at a clean-safe cut: 0.98 demo, 0.70 Brightwater).
FIT_Z_CENTER = 2.75
FIT_Z_SCALE = 0.3
#: MAD floor (in cosine units): a KB whose FAQs all fit equally well must not turn noise into large z
MIN_SPREAD = 0.03
#: reasons below this signal score are not listed (they still count in the noisy-OR)
REASON_MIN = 0.15

SCORE_MISSING = 1.0
SCORE_NO_END = 0.7  # alone above the threshold: an answer cut off mid-sentence is a defect on its own
SCORE_SHORT = 0.45  # alone below it: short answers are often right ("Yes, on every plan.")
SCORE_DUPLICATE_ANSWER = 0.6
SCORE_DUPLICATE_PHRASING = 0.6
#: "truncated" checks only apply when at least this share of the KB's answers end like sentences
END_SHARE = 0.8
#: "very short" = fewer characters than this share of the KB's median answer length
SHORT_SHARE = 0.35
_SENTENCE_END = re.compile(r"""[.!?…)\]"'”’»]\s*$""")
_FILLER = re.compile(r"^\s*(todo|tbd|tba|n/?a|none|null|fixme|xxx+|lorem ipsum.*|answer|-+|\.+|\?+)\s*[.!:]?\s*$",
                     re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")
#: encode(encoder, texts, batch_size, progress) -> (len(texts), d) L2-normalised vectors
Encode = Callable[[Any, list[str], int, bool], np.ndarray]


@dataclass(frozen=True)
class Reason:
    signal: str  # missing | truncated | short | fit | duplicate-answer | duplicate-phrasing
    score: float
    text: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"signal": self.signal, "score": round(self.score, 4), "text": self.text, "numbers": self.numbers}


@dataclass
class FaqLint:
    faq_id: str
    score: float
    flagged: bool
    reasons: list[Reason]
    answer: str
    n_phrasings: int
    numbers: dict[str, Any]  # every signal's raw value for this FAQ (None where not computed)
    dismissed: str | None = None  # an owner's reason for dismissing the finding (then not flagged)

    def as_dict(self) -> dict[str, Any]:
        out = {"faq_id": self.faq_id, "score": round(self.score, 4), "flagged": self.flagged,
               "reasons": [r.as_dict() for r in self.reasons], "n_phrasings": self.n_phrasings,
               "answer_preview": _preview(self.answer, 120), "numbers": self.numbers}
        if self.dismissed is not None:
            out["dismissed"] = self.dismissed
        return out


@dataclass
class LintReport:
    faqs: list[FaqLint]  # highest score first
    threshold: float
    encoder_id: str | None
    n_phrasings: int
    notes: list[str]

    @property
    def flagged(self) -> list[FaqLint]:
        return [f for f in self.faqs if f.flagged]

    def as_dict(self, top: int | None = None) -> dict[str, Any]:
        shown = self.faqs if top is None else self.faqs[:top]
        return {"threshold": self.threshold, "encoder": self.encoder_id, "n_faqs": len(self.faqs),
                "n_phrasings": self.n_phrasings, "n_flagged": len(self.flagged), "notes": self.notes,
                "faqs": [f.as_dict() for f in shown]}


def _preview(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))


def _robust_z(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    med = float(np.median(x))
    spread = max(float(np.median(np.abs(x - med))) * 1.4826, MIN_SPREAD)
    return (x - med) / spread, med, spread


def is_missing(answer: str | None) -> bool:
    """No usable answer: empty, a bracketed placeholder, or filler such as "TODO" / "TBD" / "n/a"."""
    return is_placeholder(answer) or bool(_FILLER.match(answer or ""))


def _answer_key(answer: str) -> str:
    return " ".join(answer.lower().split())


def group_kb(records: Iterable[KbRecord]) -> dict[str, tuple[str, list[str]]]:
    """Records -> faq_id -> (answer, distinct phrasings), in order of first appearance. A FAQ whose rows
    carry no answer gets "" (it is then reported as missing)."""
    records = list(records)
    answers: dict[str, str] = {}
    for rec in records:
        if rec.faq_id not in answers or (not answers[rec.faq_id] and rec.answer):
            answers[rec.faq_id] = rec.answer or ""
    groups = kb_groups(records)
    return {f: (a, groups.get(f, [])) for f, a in answers.items()}


def lint_kb(records: Iterable[KbRecord], encoder: Any | None = None, *, threshold: float = DEFAULT_THRESHOLD,
            prototypes: int = DEFAULT_PROTOTYPES, batch_size: int = 64, progress: bool = False,
            analogy: Any | None = None, encode: Encode | None = None) -> LintReport:
    """Lint a KB (records as `read_kb` or `FaqStore.export_records` give them). Without an encoder only
    the structural checks run. `analogy`: a model trained for the QA analogy (models/matchers/analogy.py
    `AnalogyScorer`, anything with `embed(texts) -> (n, d)`): the analogy signal is then computed in its
    space instead of the encoder's (prototypes are still the nearest FAQs by the encoder).

    `encode(encoder, texts, batch_size, progress)` -> the texts' vectors: pass index/build.py
    `encode_in_batches` to see the vectors a build of this KB would hold (an int8 runtime's vector moves
    with its batch-mates, and the fit z-scores magnify such moves); default: the encoder's own batching,
    all texts in one call."""
    kb = group_kb(records)
    ids = list(kb)
    reasons: dict[str, list[Reason]] = {f: [] for f in ids}
    numbers: dict[str, dict[str, Any]] = {f: {} for f in ids}
    notes: list[str] = []

    missing = {f for f in ids if is_missing(kb[f][0])}
    for f in missing:
        reasons[f].append(Reason("missing", SCORE_MISSING, "no answer (empty or a placeholder)",
                                 {"answer": _preview(kb[f][0], 60)}))
    real = [f for f in ids if f not in missing]
    _structure(kb, real, reasons, numbers, notes)

    n_phrasings = sum(len(qs) for _, qs in kb.values())
    fit_ids = [f for f in real if kb[f][1]]
    if encoder is None:
        notes.append("no encoder: answer fit and analogy were not computed")
    elif len(fit_ids) < MIN_FAQS_FOR_FIT:
        notes.append(f"answer fit needs at least {MIN_FAQS_FOR_FIT} FAQs with an answer and a phrasing "
                     f"({len(fit_ids)} here): not computed")
    else:
        _fit_and_analogy(kb, fit_ids, encoder, reasons, numbers, prototypes, batch_size, progress, analogy,
                         encode or _encode)

    faqs = []
    for f in ids:
        rs = sorted(reasons[f], key=lambda r: -r.score)
        score = 1.0 - float(np.prod([1.0 - r.score for r in rs])) if rs else 0.0
        faqs.append(FaqLint(f, score, score >= threshold, [r for r in rs if r.score >= REASON_MIN],
                            kb[f][0], len(kb[f][1]), numbers[f]))
    faqs.sort(key=lambda x: (-x.score, x.faq_id))
    return LintReport(faqs, threshold, getattr(encoder, "id", None) if encoder is not None else None,
                      n_phrasings, notes)


def _structure(kb: dict[str, tuple[str, list[str]]], real: list[str], reasons: dict[str, list[Reason]],
               numbers: dict[str, dict[str, Any]], notes: list[str]) -> None:
    if real:
        lengths = np.array([len(kb[f][0].strip()) for f in real])
        median_len = float(np.median(lengths))
        ends = {f: bool(_SENTENCE_END.search(kb[f][0])) for f in real}
        end_share = sum(ends.values()) / len(real)
        # the KB's own vocabulary tells a word cut in half ("passw") from a complete last word
        vocab: dict[str, int] = {}
        for f in real:
            for w in set(_WORD.findall(kb[f][0].lower())) | {w for q in kb[f][1] for w in _WORD.findall(q.lower())}:
                vocab[w] = vocab.get(w, 0) + 1
        if end_share < END_SHARE:
            notes.append(f"only {end_share:.0%} of the answers end like a sentence: the truncation check is off")
        for f in real:
            text = kb[f][0].strip()
            numbers[f]["answer_chars"] = len(text)
            numbers[f]["ends_like_sentence"] = ends[f]
            if end_share >= END_SHARE and not ends[f]:
                words = _WORD.findall(text.lower())
                last = words[-1] if words else ""
                # a lone letter other than "a"/"I" is as telling as an unknown word
                mid_word = bool(last) and text[-1:].isalnum() and (
                    vocab.get(last, 0) <= 1 or (len(last) == 1 and last not in "ai0123456789"))
                where = f"mid-word ('…{text[-12:]}')" if mid_word else f"mid-sentence ('…{text[-20:]}')"
                reasons[f].append(Reason("truncated", SCORE_NO_END, f"answer ends {where}; "
                                         f"{end_share:.0%} of the KB's answers end like a sentence",
                                         {"kb_end_share": round(end_share, 3), "mid_word": mid_word}))
            if len(text) < SHORT_SHARE * median_len:
                reasons[f].append(Reason("short", SCORE_SHORT, f"answer is {len(text)} characters, the KB's median "
                                         f"is {median_len:.0f}", {"answer_chars": len(text),
                                                                   "kb_median_chars": median_len}))
        by_answer: dict[str, list[str]] = {}
        for f in real:
            by_answer.setdefault(_answer_key(kb[f][0]), []).append(f)
        for group in by_answer.values():
            for f in group if len(group) > 1 else []:
                others = [g for g in group if g != f]
                reasons[f].append(Reason("duplicate-answer", SCORE_DUPLICATE_ANSWER,
                                         f"same answer as {_names(others)}", {"faq_ids": others}))
    by_phrasing: dict[str, list[str]] = {}
    for f, (_, qs) in kb.items():
        for q in {normalize_question(q).lower() for q in qs}:
            by_phrasing.setdefault(q, []).append(f)
    dup: dict[str, list[tuple[str, list[str]]]] = {}
    for q, group in by_phrasing.items():
        for f in group if len(group) > 1 else []:
            dup.setdefault(f, []).append((q, [g for g in group if g != f]))
    for f, items in dup.items():
        shown = "; ".join(f"'{_preview(q, 50)}' also under {_names(o)}" for q, o in items[:3])
        more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
        reasons[f].append(Reason("duplicate-phrasing", SCORE_DUPLICATE_PHRASING, f"phrasing {shown}{more}",
                                 {"phrasings": [{"question": q, "faq_ids": o} for q, o in items]}))


def _names(ids: Sequence[str], n: int = 3) -> str:
    shown = ", ".join(f"'{i}'" for i in ids[:n])
    return shown + (f" (+{len(ids) - n} more)" if len(ids) > n else "")


def _encode(encoder: Any, texts: list[str], batch_size: int, progress: bool) -> np.ndarray:
    """The default `encode`: one call, the encoder sorts by length and batches itself."""
    return np.asarray(encoder.encode(texts, batch_size=batch_size, show_progress_bar=progress), dtype=np.float32)


def _fit_and_analogy(kb: dict[str, tuple[str, list[str]]], ids: list[str], encoder: Any,
                     reasons: dict[str, list[Reason]], numbers: dict[str, dict[str, Any]],
                     prototypes: int, batch_size: int, progress: bool, analogy_model: Any | None = None,
                     encode: Encode = _encode) -> None:
    n = len(ids)
    questions = [q for f in ids for q in kb[f][1]]
    owner = np.array([i for i, f in enumerate(ids) for _ in kb[f][1]])
    texts = questions + [kb[f][0] for f in ids]
    vecs = np.asarray(encode(encoder, texts, batch_size, progress), dtype=np.float32)
    # the fits below are dot products: a vector that is not unit length is refused rather than scored
    if vecs.shape[0] != len(texts) or not np.all(np.isfinite(vecs)) or \
            not np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-3):
        raise ValueError(f"encoder {getattr(encoder, 'id', encoder)!r} gave {vecs.shape} vectors for {len(texts)} "
                         "texts: expected one finite, L2-normalised row per text")
    qv, av = vecs[: len(questions)], vecs[len(questions):]
    counts = np.bincount(owner, minlength=n).astype(np.float64)
    fit = np.zeros((n, n))
    np.add.at(fit, owner, qv @ av.T)
    fit /= counts[:, None]  # fit[i, j]: FAQ i's phrasings vs FAQ j's answer
    own = np.diag(fit).copy()
    others = fit.copy()
    # FAQs sharing one answer text are reported as duplicates; they must not hide each other's fit
    keys = [_answer_key(kb[f][0]) for f in ids]
    same = np.array([[a == b for b in keys] for a in keys]) if n <= 5000 else np.eye(n, dtype=bool)
    others[same] = -np.inf
    best_ans = others.argmax(1)  # best other answer for my phrasings
    best_q = others.argmax(0)  # best other FAQ's phrasings for my answer
    row = own - others[np.arange(n), best_ans]
    col = own - others[best_q, np.arange(n)]
    row[~np.isfinite(row)] = 0.0
    col[~np.isfinite(col)] = 0.0
    z_own, med_own, _ = _robust_z(own)
    z_row, _, _ = _robust_z(row)
    z_col, _, _ = _robust_z(col)
    z = (z_own + z_row + z_col) / 3

    # analogy: each FAQ's (mean phrasing - answer) vs those of its nearest FAQs (by phrasings)
    qm = np.zeros((n, qv.shape[1]))
    np.add.at(qm, owner, qv)
    qm /= np.linalg.norm(qm, axis=1, keepdims=True)
    if analogy_model is None:
        diff = qm - av
    else:  # the model's own, unnormalised f: E = cos(f(q_p) - f(a_p), f(q) - f(a))
        fv = np.asarray(analogy_model.embed(questions + [kb[f][0] for f in ids]), dtype=np.float64)
        fq = np.zeros((n, fv.shape[1]))
        np.add.at(fq, owner, fv[: len(questions)])
        diff = fq / counts[:, None] - fv[len(questions):]
    diff /= np.maximum(np.linalg.norm(diff, axis=1, keepdims=True), 1e-9)
    near = qm @ qm.T
    np.fill_diagonal(near, -np.inf)
    k = min(prototypes, n - 1)
    proto = np.argpartition(-near, k - 1, axis=1)[:, :k]
    analogy = np.einsum("id,ikd->ik", diff, diff[proto]).max(1)

    for i, f in enumerate(ids):
        j_ans, j_q = int(best_ans[i]), int(best_q[i])
        numbers[f].update({
            "own_fit": round(float(own[i]), 4), "kb_median_fit": round(med_own, 4),
            "row_margin": round(float(row[i]), 4), "col_margin": round(float(col[i]), 4),
            "fit_z": round(float(z[i]), 3), "best_other_answer": ids[j_ans],
            "best_other_phrasings": ids[j_q], "analogy_best_cos": round(float(analogy[i]), 4),
        })
        s = _sigmoid((-z[i] - FIT_Z_CENTER) / FIT_Z_SCALE)
        if s < REASON_MIN:
            # still counted (unlisted), so FAQs below the threshold stay ranked by how well they fit
            reasons[f].append(Reason("fit", s, "answer fits its phrasings", {"fit_z": round(float(z[i]), 3)}))
            continue
        parts = []
        if col[i] < 0:
            parts.append(f"answer fits '{ids[j_q]}' better than its own phrasings "
                         f"({fit[j_q, i]:.2f} vs {own[i]:.2f})")
        if row[i] < 0 and (col[i] >= 0 or ids[j_ans] != ids[j_q]):
            parts.append(f"its phrasings fit the answer of '{ids[j_ans]}' better than their own "
                         f"({fit[i, j_ans]:.2f} vs {own[i]:.2f})")
        if not parts:
            parts.append(f"answer fits its phrasings poorly for this KB (cosine {own[i]:.2f}, "
                         f"KB median {med_own:.2f})")
        reasons[f].append(Reason("fit", s, "; ".join(parts), {
            "own_fit": round(float(own[i]), 4), "kb_median_fit": round(med_own, 4),
            "best_other_phrasings": ids[j_q], "their_fit": round(float(fit[j_q, i]), 4),
            "best_other_answer": ids[j_ans], "other_answer_fit": round(float(fit[i, j_ans]), 4),
            "fit_z": round(float(z[i]), 3)}))


def format_report(report: LintReport, top: int | None = 20) -> str:
    """Ranked, readable text: flagged FAQs first, each with its reasons."""
    flagged = report.flagged
    lines = [f"KB lint: {len(report.faqs)} FAQs, {report.n_phrasings} phrasings, encoder "
             f"{report.encoder_id or 'none'}, threshold {report.threshold:g}: "
             f"{len(flagged)} flagged"]
    lines += [f"note: {n}" for n in report.notes]
    shown = flagged if top is None else flagged[:top]
    for rank, f in enumerate(shown, 1):
        lines.append(f"{rank:>3}. {f.faq_id}  score {f.score:.2f}  ({f.n_phrasings} phrasings)")
        for r in f.reasons:
            lines.append(f"       - [{r.signal} {r.score:.2f}] {r.text}")
        lines.append(f"       answer: {_preview(f.answer, 100)!r}")
    if len(shown) < len(flagged):
        lines.append(f"... {len(flagged) - len(shown)} more flagged (--top N shows more, --json all)")
    if not flagged:
        lines.append("No FAQ flagged.")
    return "\n".join(lines)
