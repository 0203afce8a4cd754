"""The cross-encoder's training pairs: `LabelledPair`, STS-B and pair-file readers, a KB's (positive, hard
negative) pairs per sampled anchor, and the TSV files a run writes once so `--resume` trains on the same data."""
from __future__ import annotations

import csv
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from training.loop import TrainError


@dataclass(frozen=True)
class LabelledPair:
    q1: str
    q2: str
    label: float  # 0/1 in phase A, score/5 in phase B
    source: str = ""


def read_stsb(path: str | Path) -> list[LabelledPair]:
    """Raw STS-B csv -> pairs with score / 5 in [0, 1] (parsing shared with `faq data prepare stsb`)."""
    from training.pairs import PairFileError, read_stsb_scores

    try:
        rows = read_stsb_scores(Path(path))
    except PairFileError as exc:
        raise TrainError(str(exc)) from exc
    return [LabelledPair(s1.strip(), s2.strip(), score / 5.0, "stsb") for score, s1, s2 in rows]


def read_pairs_file(path: str | Path) -> list[LabelledPair]:
    from training.pairs import read_pair_file

    name = Path(path).parent.name if Path(path).name.startswith("pairs_") else Path(path).stem
    return [LabelledPair(p.q1, p.q2, float(p.label), name) for p in read_pair_file(path)]


def intent_pairs(groups: dict[str, list[str]], anchors_per_faq: int, rng: random.Random, source: str,
                 embed=None, device: str | None = None) -> list[tuple[LabelledPair, LabelledPair]]:
    """(positive, hard negative) per sampled anchor. Hard negative = the anchor's nearest neighbour
    (cosine of `embed` vectors, MiniLM on `device` by default) among other FAQs' sampled variants, drawn
    from the 3 nearest so that one confusable FAQ does not supply every negative."""
    pool: list[tuple[str, str]] = []
    for faq_id in sorted(groups):
        variants = groups[faq_id]
        if len(variants) < 2:
            continue
        for q in rng.sample(variants, min(anchors_per_faq, len(variants))):
            pool.append((faq_id, q))
    if len(pool) < 2:
        return []
    if embed is None:
        from models.encoders.pretrained import MiniLMEncoder

        embed = MiniLMEncoder(device=device).encode
    vecs = np.asarray(embed([q for _, q in pool]), dtype=np.float32)
    faq_of = np.array([f for f, _ in pool])
    out = []
    for start in range(0, len(pool), 512):
        sims = vecs[start:start + 512] @ vecs.T
        for row, i in enumerate(range(start, min(start + 512, len(pool)))):
            faq_id, anchor = pool[i]
            s = sims[row].copy()
            s[faq_of == faq_id] = -np.inf
            nearest = np.argpartition(-s, 3)[:3] if len(s) > 3 else np.argsort(-s)
            neg = pool[int(rng.choice(list(nearest)))][1]
            others = [v for v in groups[faq_id] if v != anchor]
            pos = rng.choice(others)
            out.append((LabelledPair(anchor, pos, 1.0, source), LabelledPair(anchor, neg, 0.0, source)))
    return out



def write_pairs(path: Path, pairs: Sequence[LabelledPair]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n")
        for p in pairs:
            w.writerow([f"{p.label:g}", _clean(p.q1), _clean(p.q2), p.source])
    os.replace(tmp, path)


def _clean(text: str) -> str:
    return " ".join(text.replace("\t", " ").replace("\\", "/").split())


def read_written_pairs(path: Path) -> list[LabelledPair]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            label, q1, q2, source = line.rstrip("\n").split("\t")
            out.append(LabelledPair(q1, q2, float(label), source))
    return out

