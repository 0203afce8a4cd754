"""How well `faq kb lint` (kb/lint.py) finds broken FAQs: corrupt a clean KB on purpose and score it.

Corruptions, each on its own, over several seeds, `--share` of the KB's FAQs each time:
  swap      answers exchanged between pairs of FAQs (an answer pasted under the wrong FAQ)
  truncate  each answer cut at a random character between 10 % and 90 % of its length
  missing   answer replaced by "", a placeholder "[intent: <faq_id>]" or "TODO" (in turn)
and the untouched KB, which must get no flag at the default threshold. Per corruption: ROC AUC of the
lint score for the corrupted FAQs against all others, precision and recall at the threshold, and for
swaps how often the flag's reason names the FAQ the answer came from. The raw fit z-score and the
analogy signal are scored alone too, to show what each earns.

    faq eval kb-lint --encoder minilm --out bench/results/kb_lint_minilm
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from index.build import encode_in_batches
from kb.lint import DEFAULT_THRESHOLD, lint_kb
from kb.records import KbRecord
from kb.files import read_kb

DEMO_KB = Path(__file__).resolve().parents[1] / "app" / "demo" / "faq.jsonl"
CORRUPTIONS = ("swap", "truncate", "missing")
MISSING_FORMS = ("", "[intent: {faq_id}]", "TODO")


class MemoEncoder:
    """Encodes each distinct text once: the corrupted KBs share almost all their texts."""

    def __init__(self, inner: Any):
        self.inner, self.id, self.dim = inner, inner.id, inner.dim
        self.cache: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if new:
            for t, v in zip(new, self.inner.encode(new, batch_size=batch_size)):
                self.cache[t] = np.asarray(v, dtype=np.float32)
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Mann-Whitney AUC with ties counted half."""
    s, y = np.asarray(scores, float), np.asarray(labels, bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def corrupt(records: list[KbRecord], kind: str, share: float, seed: int) -> tuple[list[KbRecord], dict[str, str]]:
    """-> corrupted records, faq_id -> what was done (for swaps: the FAQ whose answer it got)."""
    rng = random.Random(seed)
    answers: dict[str, str] = {}
    for r in records:
        answers.setdefault(r.faq_id, r.answer or "")
    ids = list(answers)
    n = max(2, round(share * len(ids)))
    if kind == "swap":
        n -= n % 2
    picked = rng.sample(ids, n)
    new: dict[str, str] = {}
    changed: dict[str, str] = {}
    if kind == "swap":
        for a, b in zip(picked[::2], picked[1::2]):
            new[a], new[b] = answers[b], answers[a]
            changed[a], changed[b] = b, a
    elif kind == "truncate":
        for f in picked:
            text = answers[f]
            cut = rng.randint(max(1, int(0.1 * len(text))), max(1, int(0.9 * len(text))))
            new[f] = text[:cut]
            changed[f] = f"cut at {cut}/{len(text)}"
    elif kind == "missing":
        for i, f in enumerate(picked):
            new[f] = MISSING_FORMS[i % len(MISSING_FORMS)].format(faq_id=f)
            changed[f] = repr(new[f])
    else:
        raise ValueError(f"unknown corruption {kind!r}")
    out = [KbRecord(r.faq_id, r.question, new.get(r.faq_id, r.answer), r.tags) for r in records]
    return out, changed


def _scores(report, field: str | None, sign: float = 1.0) -> dict[str, float]:
    if field is None:
        return {f.faq_id: f.score for f in report.faqs}
    # FAQs without the number (missing answers) are the most suspicious by that signal
    return {f.faq_id: sign * f.numbers[field] if f.numbers.get(field) is not None else float("inf")
            for f in report.faqs}


def run(records: list[KbRecord], encoder: Any, seeds: Sequence[int], share: float,
        threshold: float = DEFAULT_THRESHOLD, analogy: Any | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    clean = lint_kb(records, encoder, threshold=threshold, analogy=analogy, encode=encode_in_batches)
    result: dict[str, Any] = {
        "encoder": getattr(encoder, "id", None), "n_faqs": len(clean.faqs), "n_phrasings": clean.n_phrasings,
        "threshold": threshold, "share": share, "seeds": list(seeds),
        "clean": {"n_flagged": len(clean.flagged), "flagged": [f.faq_id for f in clean.flagged],
                  "max_score": round(max((f.score for f in clean.faqs), default=0.0), 4),
                  "top": [(f.faq_id, round(f.score, 4)) for f in clean.faqs[:3]]},
    }
    for kind in CORRUPTIONS:
        runs = []
        for seed in seeds:
            recs, changed = corrupt(records, kind, share, seed)
            rep = lint_kb(recs, encoder, threshold=threshold, analogy=analogy, encode=encode_in_batches)
            labels = {f.faq_id: int(f.faq_id in changed) for f in rep.faqs}
            ids = list(labels)
            y = [labels[f] for f in ids]
            row: dict[str, Any] = {"seed": seed, "n_corrupted": len(changed)}
            for name, field, sign in (("score", None, 1.0), ("fit_z", "fit_z", -1.0),
                                      ("analogy", "analogy_best_cos", -1.0)):
                s = _scores(rep, field, sign)
                row[f"auc_{name}"] = roc_auc([s[f] for f in ids], y)
            flagged = {f.faq_id for f in rep.flagged}
            tp = len(flagged & set(changed))
            row["precision"] = tp / len(flagged) if flagged else 1.0
            row["recall"] = tp / len(changed)
            row["false_flags"] = sorted(flagged - set(changed))
            if kind == "swap":
                named = 0
                for f in rep.flagged:
                    if f.faq_id in changed and any(changed[f.faq_id] in r.text for r in f.reasons):
                        named += 1
                row["partner_named"] = named / tp if tp else float("nan")
            runs.append(row)
        keys = [k for k in runs[0] if k.startswith("auc_") or k in ("precision", "recall", "partner_named")]
        result[kind] = {"runs": runs, "mean": {k: round(float(np.nanmean([r[k] for r in runs])), 4) for k in keys},
                        "min": {k: round(float(np.nanmin([r[k] for r in runs])), 4) for k in keys}}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


def to_markdown(res: dict[str, Any], command: str) -> str:
    lines = [f"# KB lint on {res['kb']} ({res['encoder']})", "",
             f"`{command}`", "",
             f"{res['n_faqs']} FAQs, {res['n_phrasings']} phrasings; {res['share']:.0%} of the FAQs corrupted per run, "
             f"seeds {res['seeds']}; threshold {res['threshold']}. Untouched KB: **{res['clean']['n_flagged']} flagged** "
             f"(max score {res['clean']['max_score']}).", "",
             "| corruption | AUC score (mean / min) | precision | recall | AUC fit z alone | AUC analogy alone | reason names the partner |",
             "|---|---|---|---|---|---|---|"]
    for kind in CORRUPTIONS:
        m, lo = res[kind]["mean"], res[kind]["min"]
        partner = f"{m['partner_named']:.3f}" if "partner_named" in m else "-"
        lines.append(f"| {kind} | {m['auc_score']:.3f} / {lo['auc_score']:.3f} | {m['precision']:.3f} | "
                     f"{m['recall']:.3f} | {m['auc_fit_z']:.3f} | {m['auc_analogy']:.3f} | {partner} |")
    lines += ["", f"Wall time {res['seconds']} s (encoding cached across runs)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kb", default=str(DEMO_KB), help="clean KB file (default: the demo KB)")
    p.add_argument("--encoder", default="minilm", help="encoder spec (models/encoders/load.py)")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--share", type=float, default=0.1, help="share of FAQs corrupted per run")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    p.add_argument("--analogy-model", default=None,
                   help="a `faq train analogy` folder: the analogy signal in its space (AUC analogy alone)")
    p.add_argument("--out", help="write OUT.json and OUT.md")
    args = p.parse_args(argv)
    from app.settings import get_settings
    from models.encoders.load import load_encoder

    settings = get_settings()
    encoder = MemoEncoder(load_encoder(args.encoder, device=settings.device, cache_dir=settings.mpnet_cache))
    analogy = None
    if args.analogy_model:
        from models.matchers.analogy import load_analogy

        analogy = load_analogy(args.analogy_model, device=get_settings().device)
    res = run(read_kb(args.kb), encoder, [int(s) for s in args.seeds.split(",")], args.share, args.threshold,
              analogy=analogy)
    res["analogy_model"] = args.analogy_model
    res["kb"] = args.kb if Path(args.kb).resolve() != DEMO_KB else "app/demo/faq.jsonl"
    command = "faq eval kb-lint " + " ".join(argv if argv is not None else sys.argv[1:])
    md = to_markdown(res, command)
    print(md)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out + ".json").write_text(json.dumps({**res, "command": command}, indent=2) + "\n")
        Path(args.out + ".md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
