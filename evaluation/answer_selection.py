"""`faq eval answer-selection`: answer sentence selection on WikiQA or TrecQA, the pretrained encoder's
cosine against MMAICM models (models/matchers/mmaicm.py), alone and fused with the cosine.

Two protocols on the test split, both over the questions the standard protocol keeps (at least one
correct candidate; for TrecQA at least one wrong one too, the "clean" setting):
- standard: MAP and MRR of each question's own candidate list;
- the MMAICM paper's (section 4.3): one of the question's correct answers (seeded) among F = 5 random
  answers of other questions; nDCG (one relevant item: 1 / log2(1 + its rank)) and P@1.

Rows: the encoder's cosine (all-MiniLM-L6-v2 unless told otherwise), each MMAICM model's raw score,
and each model fused with the cosine: (1 - λ) z(cosine) + λ z(mmaicm), z either a per-question
standardisation (mean 0, sd 1 over the question's list) or the logit of a logistic calibration fitted
on the dev pairs; λ in 0, 0.05, .., 1 maximises dev MAP (ties: the smaller λ) and serves both
protocols. Ties in a ranking keep the file order. Writes report.json and report.md.

`--protocol analogy` (`run_analogy_selection`): the analogy paper's who / when / where subsets (first word,
at least one correct answer), fixed encoders' cosine and analogy scores against trained analogy /
BiGRU-cosine models (models/matchers/analogy.py), per type and combined with bootstrap 95% intervals.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from evaluation.measures import ndcg, precision_at_1, reciprocal_rank
from training.mmaicm import DATASETS, QaList, average_precision, evaluable, load_split

FUSIONS = ("zscore", "logistic")
LAMBDA_GRID = tuple(round(0.05 * i, 2) for i in range(21))
PAPER_FAKES = 5


def list_metrics(lists: Sequence[QaList], scores: Sequence[np.ndarray]) -> dict[str, float]:
    """MAP, MRR, nDCG and P@1 averaged over the lists (scores[i] scores lists[i]'s candidates)."""
    if not lists:
        return {"map": 0.0, "mrr": 0.0, "ndcg": 0.0, "p_at_1": 0.0, "questions": 0}
    cols = {"map": average_precision, "mrr": reciprocal_rank, "ndcg": ndcg, "p_at_1": precision_at_1}
    out: dict[str, float] = {k: float(np.mean([f(s, l.labels) for s, l in zip(scores, lists)])) for k, f in cols.items()}
    out["questions"] = len(lists)
    return out


# ------------------------------------------------------------------------------------------------
# the paper's protocol


def paper_lists(lists: Sequence[QaList], fakes: int = PAPER_FAKES, seed: int = 0) -> list[QaList]:
    """Per question: `fakes` answers drawn from the other questions' candidates (never a text of its own
    list), then one of its correct answers (seeded). The true answer goes last so that ties rank it
    below the fakes: a model that scores everything alike gets P@1 = 0, not 1."""
    rng = random.Random(seed)
    pool = [(i, c) for i, l in enumerate(lists) for c in l.candidates]
    out = []
    for i, l in enumerate(lists):
        own = set(l.candidates)
        positive = rng.choice([c for c, y in zip(l.candidates, l.labels) if y])
        chosen: list[str] = []
        for _ in range(1000):
            if len(chosen) == fakes:
                break
            j, text = pool[rng.randrange(len(pool))]
            if j != i and text not in own and text not in chosen:
                chosen.append(text)
        out.append(QaList(l.question, chosen + [positive], [0] * len(chosen) + [1]))
    return out


# ------------------------------------------------------------------------------------------------
# scores and fusion


def split_scores(lists: Sequence[QaList], flat: np.ndarray) -> list[np.ndarray]:
    out, start = [], 0
    for l in lists:
        out.append(np.asarray(flat[start:start + len(l.candidates)], dtype=np.float64))
        start += len(l.candidates)
    return out


def zscore(scores: np.ndarray) -> np.ndarray:
    """Per-question standardisation; a list whose scores are all equal becomes zeros."""
    scores = np.asarray(scores, dtype=np.float64)
    sd = scores.std()
    return (scores - scores.mean()) / sd if sd > 1e-12 else np.zeros_like(scores)


class Normaliser:
    """z(·) of the fusion: per-question standardisation, or the logit of a logistic calibration fitted
    once on the dev pairs (`fit`)."""

    def __init__(self, kind: str):
        if kind not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, got {kind!r}")
        self.kind = kind
        self.a, self.b = 1.0, 0.0

    def fit(self, lists: Sequence[QaList], scores: Sequence[np.ndarray]) -> "Normaliser":
        if self.kind == "logistic":
            from models.scoring import fit_platt

            x = np.concatenate(list(scores)) if scores else np.zeros(0)
            y = np.concatenate([np.asarray(l.labels) for l in lists]) if lists else np.zeros(0)
            self.a, self.b = fit_platt(x, y)
        return self

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        return zscore(scores) if self.kind == "zscore" else self.a * np.asarray(scores, dtype=np.float64) + self.b

    def describe(self) -> dict:
        return {"kind": self.kind} if self.kind == "zscore" else {"kind": self.kind, "a": self.a, "b": self.b}


def fuse(cosine: Sequence[np.ndarray], model: Sequence[np.ndarray], lam: float, z_cos: Normaliser,
         z_model: Normaliser) -> list[np.ndarray]:
    return [(1.0 - lam) * z_cos(c) + lam * z_model(m) for c, m in zip(cosine, model)]


def choose_lambda(lists: Sequence[QaList], cosine: Sequence[np.ndarray], model: Sequence[np.ndarray],
                  z_cos: Normaliser, z_model: Normaliser, grid: Sequence[float] = LAMBDA_GRID) -> tuple[float, dict]:
    """λ with the best dev MAP (ties: the smaller λ) -> (λ, MAP by λ)."""
    by_lambda = {lam: list_metrics(lists, fuse(cosine, model, lam, z_cos, z_model))["map"] for lam in grid}
    best = max(by_lambda.values())
    chosen = min(lam for lam, value in by_lambda.items() if value >= best - 1e-12)
    return chosen, by_lambda


class PairScores:
    """One signal's scores of (question, candidate) pairs, computed once per distinct pair."""

    def __init__(self, score_pairs: Callable[[list[tuple[str, str]]], np.ndarray]):
        self.score_pairs = score_pairs
        self.memo: dict[tuple[str, str], float] = {}

    def of(self, lists: Sequence[QaList]) -> list[np.ndarray]:
        todo = sorted({(l.question, c) for l in lists for c in l.candidates} - set(self.memo))
        if todo:
            for pair, s in zip(todo, np.asarray(self.score_pairs(todo), dtype=np.float64)):
                self.memo[pair] = float(s)
        return [np.array([self.memo[(l.question, c)] for c in l.candidates]) for l in lists]


def encoder_cosine(encoder: Any, batch_size: int = 64) -> Callable[[list[tuple[str, str]]], np.ndarray]:
    """Pairs -> the cosine of the encoder's (L2-normalised) vectors, each distinct text encoded once."""
    vectors: dict[str, np.ndarray] = {}

    def score(pairs: list[tuple[str, str]]) -> np.ndarray:
        todo = sorted({t for p in pairs for t in p} - set(vectors))
        if todo:
            for text, v in zip(todo, encoder.encode(todo, batch_size=batch_size)):
                vectors[text] = v
        return np.array([float(np.dot(vectors[q], vectors[c])) for q, c in pairs])

    return score


# ------------------------------------------------------------------------------------------------
# the evaluation


def run_answer_selection(data: str, src: str | Path, models: Sequence[str | Path] = (), encoder: str = "minilm",
                         fusion: str = "zscore", seed: int = 0, fakes: int = PAPER_FAKES,
                         batch_size: int = 256, progress: bool = False, command: str | None = None,
                         encoder_obj: Any = None) -> dict:
    """The report (see the module docstring); `encoder_obj` reuses an already loaded encoder."""
    if data not in DATASETS:
        raise ValueError(f"--data must be one of {', '.join(DATASETS)}, got {data!r}")
    if fusion not in FUSIONS:
        raise ValueError(f"--fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
    if fakes < 1:
        raise ValueError(f"--fakes must be >= 1, got {fakes}")
    t0 = time.perf_counter()
    test_all, dev_all = load_split(data, src, "test"), load_split(data, src, "dev")
    test, dev = evaluable(test_all, data), evaluable(dev_all, data)
    # TrecQA's other common setting keeps the questions whose candidates are all correct (AP = 1 for any
    # scorer); WikiQA's filtered setting is already this one
    raw = [l for l in test_all if l.n_positive > 0] if data == "trecqa" else None
    if not test:
        raise ValueError(f"{src}: no test question with a correct answer{' and a wrong one' if data == 'trecqa' else ''}")
    paper = paper_lists(test, fakes=fakes, seed=seed)

    from app.settings import get_settings

    settings = get_settings()
    if encoder_obj is None:
        from models.encoders.load import load_encoder

        encoder_obj = load_encoder(encoder, device=settings.device, cache_dir=settings.mpnet_cache)
    cosine = PairScores(encoder_cosine(encoder_obj))
    cos = {"test": cosine.of(test), "paper": cosine.of(paper), "dev": cosine.of(dev), "raw": cosine.of(raw or [])}
    rows: list[dict] = [_row(f"cosine ({getattr(encoder_obj, 'id', encoder)})", "cosine", test, paper, dev, raw, cos)]
    z_cos = Normaliser(fusion).fit(dev, cos["dev"])
    first_of_kind: dict[str, Any] = {}  # one word representation and word-vector cache per kind
    for folder in models:
        from models.matchers.mmaicm import load_mmaicm, read_config

        kind = read_config(Path(folder) / "config.json").word_repr
        shared = first_of_kind.get(kind)
        scorer = load_mmaicm(folder, cache_size=None, words=shared.words if shared else None,
                             device=settings.device, cache_dir=settings.mpnet_cache)
        if shared is not None:
            scorer.share_cache(shared)
        else:
            first_of_kind[kind] = scorer
        name = Path(folder).resolve().name
        signal = PairScores(lambda pairs, s=scorer: s.score_pairs(pairs, batch_size=batch_size, progress=progress))
        mm = {"test": signal.of(test), "paper": signal.of(paper), "dev": signal.of(dev), "raw": signal.of(raw or [])}
        config = {k: getattr(scorer.config, k) for k in ("word_repr", "matcher", "use_attention", "context", "alpha")}
        rows.append(_row(name, "mmaicm", test, paper, dev, raw, mm, folder=str(folder), config=config, id=scorer.id))
        z_mm = Normaliser(fusion).fit(dev, mm["dev"])
        if dev:
            lam, by_lambda = choose_lambda(dev, cos["dev"], mm["dev"], z_cos, z_mm)
        else:
            lam, by_lambda = 0.5, {}
        fused = {k: fuse(cos[k], mm[k], lam, z_cos, z_mm) for k in cos}
        rows.append(_row(f"{name} + cosine", "fused", test, paper, dev, raw, fused, folder=str(folder), config=config,
                         id=scorer.id, **{"lambda": lam, "fusion": {"cosine": z_cos.describe(), "model": z_mm.describe()},
                                          "dev_map_by_lambda": {str(k): round(v, 6) for k, v in by_lambda.items()}}))
    return {
        "dataset": data,
        "src": str(src),
        "command": command,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "encoder": getattr(encoder_obj, "id", encoder),
        "fusion": fusion,
        "seed": seed,
        "paper_fakes": fakes,
        "questions": {"test": len(test_all), "test_evaluated": len(test), "test_raw": None if raw is None else len(raw),
                      "dev": len(dev_all),
                      "dev_evaluated": len(dev), "test_pairs": sum(len(l.candidates) for l in test)},
        "protocol": {
            "standard": "MAP / MRR over test questions with >= 1 correct answer"
                        + (" and >= 1 wrong one (clean)" if data == "trecqa" else " (filtered)"),
            "paper": f"nDCG / P@1: one correct answer among {fakes} random answers of other test questions (seed {seed})",
            "fused": f"(1 - λ) z(cosine) + λ z(mmaicm), z = {fusion}, λ maximises dev MAP",
            **({"raw": "raw MAP / MRR: every test question with >= 1 correct answer (also those without a wrong one)"}
               if raw is not None else {}),
        },
        "rows": rows,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


# ------------------------------------------------------------------------------------------------
# the analogy paper's protocol (models/matchers/analogy.py): who / when / where subsets, per type and combined

ANALOGY_ENCODERS = ("glove", "minilm", "mpnet")
#: the paper's Table 2 (questions with a correct answer, by type); TrecQA train is its TRAIN-ALL
PAPER_TABLE2 = {
    "wikiqa": {"train": {"who": 119, "when": 86, "where": 71}, "dev": {"who": 15, "when": 11, "where": 17},
               "test": {"who": 34, "when": 16, "where": 22}},
    "trecqa": {"train": {"who": 190, "when": 116, "where": 96}, "dev": {"who": 11, "when": 13, "where": 9},
               "test": {"who": 8, "when": 19, "where": 11}},
}


def typed_subsets(lists: Sequence[QaList]) -> dict[str, list[QaList]]:
    """The paper's subsets: questions whose first word is who / when / where with at least one correct
    answer (TrecQA included: a question whose candidates are all correct stays, as in its Table 2)."""
    from models.matchers.analogy import QUESTION_TYPES, question_type

    out: dict[str, list[QaList]] = {t: [] for t in QUESTION_TYPES}
    for l in lists:
        t = question_type(l.question)
        if t is not None and l.n_positive > 0:
            out[t].append(l)
    return out


def bootstrap_interval(values: Sequence[float], reps: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of per-question values, questions resampled with replacement."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(reps, len(v)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


class GloveAverage:
    """Sentence = the mean of its GloVe 6B-50d word vectors (the paper's "GloVe" row), not normalised:
    the analogy rows subtract the vectors."""

    id = "glove-average:6B-50d"

    def __init__(self):
        from models.encoders.words import GloveWords

        self.words = GloveWords()

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        states = self.words.states(list(texts), 200)
        return np.stack([s.mean(dim=0).numpy() if s.size(0) else np.zeros(self.words.dim, np.float32)
                         for s in states]).astype(np.float32)


class _Memo:
    """An encoder whose vectors are computed once per text (the rows re-read the same texts)."""

    def __init__(self, encoder: Any):
        self.encoder, self.id, self.vectors = encoder, getattr(encoder, "id", None), {}

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        todo = sorted(set(texts) - set(self.vectors))
        if todo:
            for text, v in zip(todo, np.asarray(self.encoder.encode(todo, batch_size=batch_size), dtype=np.float32)):
                self.vectors[text] = v
        return np.stack([self.vectors[t] for t in texts])


def _vector_scores(encoder: Any, lists: Sequence[QaList], prototypes: Sequence[Any], analogy: bool) -> list[np.ndarray]:
    """A fixed encoder's scores: cos(f(q), f(a)), or the analogy score (best of the prototypes of q's type)."""
    import torch

    from models.matchers.analogy import best_of_prototypes, question_type

    texts = sorted({l.question for l in lists} | {c for l in lists for c in l.candidates}
                   | {t for p in prototypes for t in (p.question, p.answer)})
    vectors = torch.from_numpy(np.asarray(encoder.encode(texts, batch_size=64), dtype=np.float32))
    row = {t: i for i, t in enumerate(texts)}
    out = []
    for l in lists:
        q, a = vectors[row[l.question]], vectors[[row[c] for c in l.candidates]]
        if not analogy:
            out.append(torch.nn.functional.cosine_similarity(q.unsqueeze(0), a, dim=-1).numpy())
            continue
        protos = [p for p in prototypes if p.type == (question_type(l.question) or "any")] or list(prototypes)
        q_p, a_p = vectors[[row[p.question] for p in protos]], vectors[[row[p.answer] for p in protos]]
        out.append(best_of_prototypes(q_p, a_p, q, a).numpy())
    return out


def _typed_row(name: str, kind: str, subsets: dict[str, list[QaList]], scores: dict[str, list[np.ndarray]],
               reps: int, seed: int, dev_map: float | None = None, **extra) -> dict:
    per_type: dict[str, dict] = {}
    for t, lists in list(subsets.items()) + [("combined", [l for ls in subsets.values() for l in ls])]:
        s = scores[t] if t != "combined" else [x for tt in subsets for x in scores[tt]]
        ap = [average_precision(x, l.labels) for x, l in zip(s, lists)]
        rr = [reciprocal_rank(x, l.labels) for x, l in zip(s, lists)]
        per_type[t] = {"questions": len(lists), "map": round(float(np.mean(ap)) if ap else 0.0, 4),
                       "mrr": round(float(np.mean(rr)) if rr else 0.0, 4),
                       "map_ci95": [round(x, 4) for x in bootstrap_interval(ap, reps, seed)],
                       "mrr_ci95": [round(x, 4) for x in bootstrap_interval(rr, reps, seed)]}
    return {"name": name, "kind": kind, **per_type, "dev_map": None if dev_map is None else round(dev_map, 4), **extra}


def run_analogy_selection(data: str, src: str | Path, models: Sequence[str | Path] = (),
                          encoders: Sequence[str] = ANALOGY_ENCODERS, prototypes: int = 30, seed: int = 0,
                          bootstrap: int = 1000, command: str | None = None, encoder_objs: dict | None = None) -> dict:
    """The analogy paper's protocol on the test split's who / when / where questions: for each fixed
    encoder (GloVe average, MiniLM, mpnet) the plain cosine and the analogy score with `prototypes` per
    type drawn from train with `seed` (the trainer's draw), then each trained model (models/matchers/analogy.py:
    analogy or BiGRU cosine) with its own prototypes. Per type and combined: MAP, MRR, questions and a
    bootstrap 95% interval over questions; combined dev MAP too."""
    from models.matchers.analogy import load_analogy, select_prototypes

    if data not in DATASETS:
        raise ValueError(f"--data must be one of {', '.join(DATASETS)}, got {data!r}")
    unknown = sorted(set(encoders) - set(ANALOGY_ENCODERS))
    if unknown:
        raise ValueError(f"unknown encoders {unknown}: expected some of {', '.join(ANALOGY_ENCODERS)}")
    t0 = time.perf_counter()
    splits = {name: typed_subsets(load_split(data, src, name)) for name in ("train", "dev", "test")}
    test, dev = splits["test"], splits["dev"]
    dev_lists = [l for ls in dev.values() for l in ls]
    train_lists = [l for ls in splits["train"].values() for l in ls]
    protos = select_prototypes(train_lists, prototypes, seed=seed)
    counts = {name: {t: len(ls) for t, ls in sub.items()} for name, sub in splits.items()}

    def by_type(score_lists) -> dict[str, list[np.ndarray]]:
        return {t: score_lists(ls) for t, ls in test.items()}

    rows: list[dict] = []
    encoder_objs = dict(encoder_objs or {})
    for spec in encoders:
        enc = encoder_objs.get(spec)
        if enc is None:
            if spec == "glove":
                enc = GloveAverage()
            else:
                from app.settings import get_settings
                from models.encoders.load import load_encoder

                settings = get_settings()
                enc = load_encoder(spec, device=settings.device, cache_dir=settings.mpnet_cache)
        enc = encoder_objs[spec] = enc if isinstance(enc, _Memo) else _Memo(enc)
        label = {"glove": "GloVe average", "minilm": "MiniLM", "mpnet": "mpnet"}[spec]
        for analogy in (False, True):
            f = lambda ls, e=enc, a=analogy: _vector_scores(e, ls, protos, a)  # noqa: E731
            dev_map = float(np.mean([average_precision(x, l.labels) for x, l in zip(f(dev_lists), dev_lists)])) \
                if dev_lists else None
            rows.append(_typed_row(f"{label} {'analogy (best of k)' if analogy else 'cosine'}",
                                   "encoder-analogy" if analogy else "encoder-cosine", test, by_type(f), bootstrap, seed,
                                   dev_map, encoder=getattr(enc, "id", spec), prototypes=len(protos) if analogy else None))
    words: dict[str, Any] = {}
    from app.settings import get_settings

    device = get_settings().device
    for folder in models:
        scorer = load_analogy(folder, device=device)
        if scorer.words.kind in words:  # one GloVe table / MiniLM per kind and one word-vector cache
            scorer.words, scorer.word_cache = words[scorer.words.kind]
        else:
            words[scorer.words.kind] = (scorer.words, scorer.word_cache)
        cfg = scorer.config
        dev_scores = scorer.score_lists(dev_lists) if dev_lists else []
        dev_map = float(np.mean([average_precision(x, l.labels) for x, l in zip(dev_scores, dev_lists)])) \
            if dev_lists else None
        name = f"{'analogy' if cfg.objective == 'analogy' else 'BiGRU cosine'} ({cfg.word_repr}): {Path(folder).name}"
        model_test = by_type(scorer.score_lists)
        rows.append(_typed_row(name, cfg.objective, test, model_test, bootstrap, seed, dev_map,
                               folder=str(folder), config=dataclasses.asdict(cfg),
                               prototypes=len(scorer.prototypes) if cfg.objective == "analogy" else None))
        if "minilm" in encoder_objs and dev_lists:
            # ours: the model fused with MiniLM's cosine, (1 - λ) z(cos) + λ z(model), z per question and
            # λ chosen on the typed dev questions, as the standard protocol fuses MMAICM
            z = Normaliser("zscore")
            cos = lambda ls: _vector_scores(encoder_objs["minilm"], ls, protos, False)  # noqa: E731
            lam, by_lambda = choose_lambda(dev_lists, cos(dev_lists), dev_scores, z, z)
            cos_test = by_type(cos)
            fused = {t: fuse(cos_test[t], model_test[t], lam, z, z) for t in test}
            dev_fused = list_metrics(dev_lists, fuse(cos(dev_lists), dev_scores, lam, z, z))["map"]
            rows.append(_typed_row(f"{name} + MiniLM cosine", "fused", test, fused, bootstrap, seed, dev_fused,
                                   folder=str(folder), **{"lambda": lam,
                                   "dev_map_by_lambda": {str(k): round(v, 6) for k, v in by_lambda.items()}}))
    return {
        "dataset": data, "src": str(src), "command": command,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "protocol": {"analogy": "the analogy paper's: test questions whose first word is who / when / where, with "
                                ">= 1 correct answer; MAP / MRR per type and combined; 95% intervals: percentile "
                                f"bootstrap over questions ({bootstrap} resamples, seed {seed})",
                     "prototypes": f"{prototypes} per type from train (seed {seed}) for the fixed encoders' analogy "
                                   "rows; trained models use their own",
                     "fused": "a model + MiniLM cosine: (1 - λ) z(cos) + λ z(model), z per question, λ in 0, 0.05, "
                              ".., 1 maximises typed dev MAP"},
        "questions": counts, "paper_table2": PAPER_TABLE2[data], "seed": seed, "bootstrap": bootstrap,
        "rows": rows, "wall_s": round(time.perf_counter() - t0, 1),
    }


def format_analogy_markdown(report: dict) -> str:
    q, paper = report["questions"], report["paper_table2"]
    types = list(q["test"])
    lines = [f"# Answer selection, who / when / where: {report['dataset']} test ({report['date']})", "",
             f"- protocol: {report['protocol']['analogy']}", f"- prototypes: {report['protocol']['prototypes']}",
             f"- fused: {report['protocol']['fused']}",
             *([f"- command: `{report['command']}`"] if report.get("command") else []), "",
             "| split | " + " | ".join(types) + " | combined | paper (Table 2) |",
             "|---|" + "---|" * (len(types) + 2)]
    for split in ("train", "dev", "test"):
        c = q[split]
        lines.append(f"| {split} | " + " | ".join(str(c[t]) for t in types) + f" | {sum(c.values())} | "
                     + " / ".join(str(paper[split][t]) for t in types) + f" = {sum(paper[split].values())} |")
    lines += ["", "MAP / MRR per type; combined with its 95% bootstrap interval; n = questions", "",
              "| row | " + " | ".join(f"{t} (n={q['test'][t]})" for t in types)
              + f" | combined MAP (n={sum(q['test'].values())}) | combined MRR | dev MAP | λ |",
              "|---|" + "---|" * (len(types) + 4)]
    for r in report["rows"]:
        c = r["combined"]
        dev = "-" if r["dev_map"] is None else f"{r['dev_map']:.4f}"
        lines.append(f"| {r['name']} | " + " | ".join(f"{r[t]['map']:.3f} / {r[t]['mrr']:.3f}" for t in types)
                     + f" | {c['map']:.4f} [{c['map_ci95'][0]:.3f}, {c['map_ci95'][1]:.3f}]"
                     + f" | {c['mrr']:.4f} [{c['mrr_ci95'][0]:.3f}, {c['mrr_ci95'][1]:.3f}] | {dev} | "
                     + ("-" if r.get("lambda") is None else f"{r['lambda']:g}") + " |")
    return "\n".join(lines) + "\n"


def _row(name: str, kind: str, test, paper, dev, raw, scores: dict, **extra) -> dict:
    standard = list_metrics(test, scores["test"])
    if raw is not None:
        raw_m = list_metrics(raw, scores["raw"])
        extra = {"raw_map": round(raw_m["map"], 4), "raw_mrr": round(raw_m["mrr"], 4), **extra}
    paper_m = list_metrics(paper, scores["paper"])
    dev_m = list_metrics(dev, scores["dev"]) if dev else {"map": None, "mrr": None}
    return {
        "name": name,
        "kind": kind,
        "map": round(standard["map"], 4),
        "mrr": round(standard["mrr"], 4),
        "paper_ndcg": round(paper_m["ndcg"], 4),
        "paper_p_at_1": round(paper_m["p_at_1"], 4),
        "dev_map": None if dev_m["map"] is None else round(dev_m["map"], 4),
        "dev_mrr": None if dev_m["mrr"] is None else round(dev_m["mrr"], 4),
        **extra,
    }


def format_markdown(report: dict) -> str:
    q = report["questions"]
    lines = [
        f"# Answer selection: {report['dataset']} test ({report['date']})",
        "",
        f"- standard: {report['protocol']['standard']}: {q['test_evaluated']} of {q['test']} questions, "
        f"{q['test_pairs']} pairs",
        f"- paper: {report['protocol']['paper']}",
        f"- fused: {report['protocol']['fused']} ({q['dev_evaluated']} dev questions)",
        *([f"- command: `{report['command']}`"] if report.get("command") else []),
        "",
    ]
    raw = q.get("test_raw") is not None
    if raw:
        lines.insert(-1, f"- raw: {report['protocol']['raw']}: {q['test_raw']} questions")
    lines += [
        "| row | MAP | MRR | " + ("raw MAP | raw MRR | " if raw else "") + "nDCG (1+5) | P@1 (1+5) | dev MAP | λ |",
        "|---|---|---|" + ("---|---|" if raw else "") + "---|---|---|---|",
    ]
    for r in report["rows"]:
        lam = r.get("lambda")
        dev = "-" if r["dev_map"] is None else f"{r['dev_map']:.4f}"
        raw_cols = f"{r['raw_map']:.4f} | {r['raw_mrr']:.4f} | " if raw else ""
        lines.append(f"| {r['name']} | {r['map']:.4f} | {r['mrr']:.4f} | {raw_cols}{r['paper_ndcg']:.4f} | "
                     f"{r['paper_p_at_1']:.4f} | {dev} | {'-' if lam is None else f'{lam:g}'} |")
    return "\n".join(lines) + "\n"


def write_report(report: dict, out: str | Path) -> tuple[Path, Path]:
    """report.json and report.md (the analogy protocol's report has its own tables)."""
    markdown = format_analogy_markdown(report) if "analogy" in report.get("protocol", {}) else format_markdown(report)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / "report.json", out / "report.md")
    for path, text in zip(paths, (json.dumps(report, indent=2, default=str) + "\n", markdown)):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return paths


__all__ = [
    "FUSIONS", "LAMBDA_GRID", "Normaliser", "PairScores", "choose_lambda", "encoder_cosine", "format_markdown",
    "fuse", "list_metrics", "paper_lists", "run_answer_selection",
    "write_report", "zscore", "average_precision", "evaluable", "load_split", "run_analogy_selection",
    "format_analogy_markdown", "typed_subsets", "bootstrap_interval", "GloveAverage", "PAPER_TABLE2",
]
