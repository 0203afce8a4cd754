"""Training the cross-encoder re-ranker by sequential transfer (`faq train reranker`).

Phase A, binary equivalence (BCE on the logit) on paraphrase pairs:
  - labelled pair files (`--pairs`: QQP `qqp_bimpm/dev.tsv`, MRPC train; never MRPC test, whose
    sentences are in STS-B's MSRpar part, as the STS-B readme warns);
  - intent KBs (`--kb`): variants of one faq_id are paraphrases; each sampled anchor gets one positive
    (another variant of its FAQ) and one hard negative (its all-MiniLM-L6-v2 nearest neighbour among
    the other FAQs' sampled variants);
  - rule-based minimal edits (`augment`, ours, not in the paper): training sentences with one word or
    phrase changed by the stress suite's perturbation types (negation, increase/decrease, comparative,
    also with its two sides swapped, quantifier, modal, direction, number, role swap of two noun
    phrases) as negatives, and meaning-preserving rewrites (contractions, synonyms, the converse
    comparative, "A and B" -> "B and A", punctuation) as positives, so the model learns that one
    flipped word can change the answer but a reworded question does not. No stress-suite pair is used.
Phase B, STS-B regression: MSE between sigmoid(STS logit) and score / 5 (raw `sts-train.csv`).
  - default (`sts_head`, ours): a separate regression head, and every STS-B batch is followed by a
    rehearsal batch of phase A pairs on the match head, so the encoder keeps what phase A taught it.
    Measured here with the paper's single head, phase B took the stress suite from 0.750 (after
    phase A) to 0.597 (= always "different"): STS-B rates "increase" vs "decrease" as half similar.
  - `sts_head=False` (the paper's recipe): the phase A head itself becomes the regression head.
Then `p = sigmoid(a * logit + b)` is fitted on the held-out binary pairs (a `holdout_fraction` of
every pair file and of the KB anchors, never trained on; written to `heldout_pairs.tsv` for
threshold tuning), the folder is saved and exported to ONNX (fp32 + int8).

Budget: `max_minutes` covers the whole run. After a few phase A steps the measured speed decides
how many phase A steps fit next to phase B, and the learning-rate schedule is planned for that many,
so a cut run still ends with a decayed learning rate (the speed is the median of the timing windows
so far: another job that slows a few windows must not cut phase A for good). A checkpoint
(`checkpoint.pt`: weights, optimiser, phase, step, plan, RNG) is written every `checkpoint_every`
steps and on Ctrl-C; `--resume` continues from it with the same data (`train_pairs_a.tsv` is written
once). `stop_after_minutes` ends one invocation with a checkpoint without changing the plan, so a long
run (mpnet on a CPU) goes in chunks: the same command with `--resume` until it exits 0.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import os
import random
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from kb.records import kb_groups, read_kb
from models.scoring import fit_platt, sigmoid
from models.matchers.cross_encoder import (
    RerankerConfig, build_module, encode_pairs, export_onnx, load_tokenizer, save_reranker,
)

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
PAIRS_A_FILE = "train_pairs_a.tsv"
HELDOUT_FILE = "heldout_pairs.tsv"


class RerankTrainError(ValueError):
    """Bad training input (no data, unreadable files, a checkpoint of another run)."""


class TrainingPaused(Exception):
    """`stop_after_minutes` reached: a checkpoint is saved, `--resume` continues."""


@dataclass
class RerankTrainConfig:
    base: str = "minilm"  # "minilm" (all-MiniLM-L6-v2, 6 layers) or "mpnet" (all-mpnet-base-v2, 12 layers)
    n_layers: int = 4
    max_len: int = 64
    pooling: str = "mean"
    seed: int = 0
    # phase A
    epochs_a: int = 2
    batch_a: int = 32
    lr_a: float = 7e-5
    anchors_per_faq: int = 40  # sampled KB variants per FAQ (each -> 1 positive + 1 hard negative)
    augment: bool = True
    augment_max: int = 16000  # rule-based pairs at most
    # phase B
    epochs_b: int = 3
    batch_b: int = 16
    lr_b: float = 4e-5
    sts_head: bool = True  # separate regression head + phase A rehearsal in phase B (False: the paper's single head)
    # embeddings and the first N layers stay as pretrained: no backward pass through them (with mpnet's
    # 12 layers, freezing 4 saves about a fifth of a step)
    frozen_layers: int = 0
    # pairs per rehearsal batch (None = batch_b); smaller costs less where a step is expensive (mpnet on a CPU)
    rehearse_batch: int | None = None
    # both
    warmup: float = 0.06
    weight_decay: float = 0.01
    holdout_fraction: float = 0.2  # of every pair file and of the KB anchors: calibration / threshold data
    max_minutes: float | None = None
    # this invocation stops (checkpoint saved, exit code 3) after so many minutes; `--resume` goes on.
    # Unlike max_minutes it does not shorten the plan: it splits one long run into chunks
    stop_after_minutes: float | None = None
    checkpoint_every: int = 200
    # served weight of the cross-encoder in its pool with the first stage (the folder's fusion_weight):
    # measured best on dev, CLINC150 0.3 and BANKING77 0.0; 1.0 (the paper's pure cross-encoder score)
    # was the worst setting on both (dev answer F1 0.514 / 0.357 vs 0.899 / 0.904 at 0.3)
    fusion_weight: float = 0.3


@dataclass(frozen=True)
class LabelledPair:
    q1: str
    q2: str
    label: float  # 0/1 in phase A, score/5 in phase B
    source: str = ""


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def read_stsb(path: str | Path) -> list[LabelledPair]:
    """Raw STS-B csv -> pairs with score / 5 in [0, 1] (parsing shared with `faq data prepare stsb`)."""
    from training.pairs import PairFileError, read_stsb_scores

    try:
        rows = read_stsb_scores(Path(path))
    except PairFileError as exc:
        raise RerankTrainError(str(exc)) from exc
    return [LabelledPair(s1.strip(), s2.strip(), score / 5.0, "stsb") for score, s1, s2 in rows]


def read_pairs_file(path: str | Path) -> list[LabelledPair]:
    from training.pairs import read_pair_file

    name = Path(path).parent.name if Path(path).name.startswith("pairs_") else Path(path).stem
    return [LabelledPair(p.q1, p.q2, float(p.label), name) for p in read_pair_file(path)]


def intent_pairs(groups: dict[str, list[str]], anchors_per_faq: int, rng: random.Random, source: str,
                 embed=None) -> list[tuple[LabelledPair, LabelledPair]]:
    """(positive, hard negative) per sampled anchor. Hard negative = the anchor's nearest neighbour
    (cosine of `embed` vectors, MiniLM by default) among other FAQs' sampled variants, drawn from
    the 3 nearest so that one confusable FAQ does not supply every negative."""
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

        embed = MiniLMEncoder().encode
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


# -- rule-based minimal edits ------------------------------------------------------------------
# word flips by the stress suite's perturbation types; `perturb` picks a type first, then a rule, so
# that a sentence offering many antonyms does not drown the rarer types
_INC_DEC = [
    ("increase", "decrease"), ("increased", "decreased"), ("raise", "lower"), ("add", "remove"),
    ("added", "removed"), ("enable", "disable"), ("activate", "deactivate"), ("lock", "unlock"),
    ("open", "close"), ("start", "stop"), ("buy", "sell"), ("deposit", "withdraw"), ("accept", "decline"),
    ("extend", "shorten"), ("upgrade", "downgrade"), ("join", "leave"), ("allowed", "forbidden"),
    ("possible", "impossible"), ("legal", "illegal"), ("win", "lose"), ("true", "false"), ("old", "new"),
    ("cheap", "expensive"), ("private", "public"), ("early", "late"), ("first", "last"), ("before", "after"),
    ("maximum", "minimum"), ("include", "exclude"), ("included", "excluded"), ("approve", "reject"),
    ("approved", "rejected"), ("charge", "refund"), ("charged", "refunded"), ("connect", "disconnect"),
    ("subscribe", "unsubscribe"), ("hide", "show"), ("pause", "resume"), ("block", "unblock"),
]
_COMPARATIVE = [
    ("more", "less"), ("higher", "lower"), ("better", "worse"), ("faster", "slower"), ("bigger", "smaller"),
    ("larger", "smaller"), ("cheaper", "pricier"), ("longer", "shorter"), ("greater", "smaller"),
    ("earlier", "later"), ("easier", "harder"), ("safer", "riskier"), ("newer", "older"), ("best", "worst"),
    ("highest", "lowest"), ("cheapest", "most expensive"), ("fastest", "slowest"), ("more", "fewer"),
]
_QUANTIFIER = [
    ("all", "some"), ("all", "none of"), ("every", "no"), ("every", "some"), ("always", "never"),
    ("always", "sometimes"), ("any", "no"), ("most", "few"), ("both", "neither of"), ("everyone", "no one"),
    ("everything", "nothing"), ("each", "no"), ("many", "few"),
]
_MODAL = [
    ("must", "might"), ("must", "can"), ("have to", "can"), ("need to", "can"),
    ("required", "optional"), ("required", "allowed"), ("mandatory", "optional"),
    ("should", "could"), ("will", "might"), ("can", "must"), ("may", "must"), ("allowed to", "required to"),
]
_DIRECTION = [
    ("north", "south"), ("east", "west"), ("up", "down"), ("left", "right"), ("incoming", "outgoing"),
    ("import", "export"), ("upload", "download"), ("send", "receive"), ("sent", "received"),
    ("above", "below"), ("inbound", "outbound"), ("arrivals", "departures"), ("into", "out of"),
    ("log in", "log out"), ("sign in", "sign out"), ("turn on", "turn off"), ("check in", "check out"),
    ("switch on", "switch off"), ("opt in", "opt out"), ("top up", "cash out"), ("upstairs", "downstairs"),
]
# prepositions alone are too noisy to flip ("friends in real life"): only the phrases above
_FLIPS = {"inc_dec": _INC_DEC, "comparative": _COMPARATIVE, "quantifier": _QUANTIFIER, "modal": _MODAL,
          "direction": _DIRECTION}
_COMPARATIVE_OF = {a: b for a, b in _COMPARATIVE} | {b: a for a, b in _COMPARATIVE} | {"more expensive": "cheaper"}
_DETERMINERS = r"(?:my|the|a|an|your|our|their|his|her)"
_AUX = {"is", "are", "was", "were", "can", "could", "should", "will", "would", "do", "does", "did", "has", "have", "must"}
_NT = {"can": "can't", "will": "won't", "do": "don't", "does": "doesn't", "did": "didn't", "is": "isn't",
       "are": "aren't", "was": "wasn't", "were": "weren't", "could": "couldn't", "should": "shouldn't",
       "would": "wouldn't", "has": "hasn't", "have": "haven't", "must": "mustn't"}
_UN_NT = {v: k for k, v in _NT.items()} | {"cannot": "can", "dont": "do", "cant": "can"}
_PRONOUNS = {"i", "you", "we", "they", "he", "she", "it"}
_WH = {"what", "which", "who", "whom", "whose", "where", "when", "why", "how"}
_NEGATABLE_VERBS = {"want", "need", "have", "like", "know", "see", "understand", "remember", "recognize",
                    "recognise", "agree", "accept", "own", "use", "care", "mind", "think", "get", "receive"}
_NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_SAME_MEANING = [
    (r"\bdo not\b", "don't"), (r"\bdon't\b", "do not"), (r"\bcannot\b", "can't"), (r"\bcan't\b", "cannot"),
    (r"\bwhat is\b", "what's"), (r"\bwhat's\b", "what is"), (r"\bi am\b", "i'm"), (r"\bi'm\b", "i am"),
    (r"^how do i\b", "how can i"), (r"^how can i\b", "how do i"), (r"^can you\b", "could you"),
    (r"^could you\b", "can you"), (r"\bi want to\b", "i would like to"), (r"\bi would like to\b", "i want to"),
    (r"\bis it possible to\b", "can i"), (r"\bhelp me\b", "help me please"),
    (r"\bdo i have to\b", "do i need to"), (r"\bdo i need to\b", "do i have to"), (r"\bmust i\b", "do i have to"),
    (r"\bis it required\b", "is it mandatory"), (r"\bquickly\b", "fast"), (r"\bpurchase\b", "buy"),
    (r"\bfunds\b", "money"), (r"\bmoney\b", "funds"), (r"\bphone\b", "mobile"), (r"\bcancel\b", "call off"),
    (r"\bget\b", "receive"), (r"\breceive\b", "get"), (r"\bfix\b", "repair"), (r"\bstart\b", "begin"),
]


def _words(text: str) -> list[str]:
    return text.split()


def _match_case(src: str, new: str) -> str:
    return new.capitalize() if src[:1].isupper() else new


def perturb(text: str, rng: random.Random) -> tuple[str, str] | None:
    """One meaning-changing edit of `text`: (kind, new text), or None when no rule applies."""
    words = _words(text)
    low = [re.sub(r"[^\w']", "", w.lower()) for w in words]
    options: list[tuple[str, str]] = []
    # negation: remove an existing one; else "i need" -> "i don't need", "do i need" -> "do i not need",
    # "my card is blocked" -> "my card is not blocked" (never right after a wh-word: "what is not the ...")
    for i, w in enumerate(low):
        if w in _UN_NT:
            new = words[:i] + [_match_case(words[i], _UN_NT[w])] + words[i + 1:]
            options.append(("negation", " ".join(new)))
            break
        if w == "not" or (w == "no" and i > 0):
            options.append(("negation", " ".join(words[:i] + words[i + 1:])))
            break
    else:
        for i, w in enumerate(low[:-1]):
            nxt = low[i + 1]
            if w in _AUX and nxt in _PRONOUNS and i + 2 < len(low):
                options.append(("negation", " ".join(words[:i + 2] + ["not"] + words[i + 2:])))
                break
            if w in _PRONOUNS and nxt in _NEGATABLE_VERBS:
                options.append(("negation", " ".join(words[:i + 1] + ["don't" if w != "he" and w != "she" else "doesn't"]
                                                     + words[i + 1:])))
                break
            if w in _AUX and i > 0 and low[i - 1] not in _WH and low[i - 1] not in _AUX and nxt not in _PRONOUNS:
                options.append(("negation", " ".join(words[:i + 1] + ["not"] + words[i + 1:])))
                break
    # increase/decrease, comparative, quantifier, modal and direction flips (one word or phrase)
    for kind, table in _FLIPS.items():
        for x, y in table:
            for src, dst in ((x, y), (y, x)):
                m = re.search(rf"\b{src}\b", text, flags=re.I)
                if m:
                    new = dst.capitalize() if m.group(0)[:1].isupper() else dst
                    options.append((kind, text[:m.start()] + new + text[m.end():]))
    # comparative with its two sides swapped: "is A cheaper than B" -> "is B cheaper than A"
    m = re.search(r"\b(is|are|was|were|does|do) (.+?) (\w+er|more \w+|less \w+) than (.+?)([?.!]*)$", text, flags=re.I)
    if m and m.group(2).lower() != m.group(4).lower():
        options.append(("comparative", text[:m.start(2)] + f"{m.group(4)} {m.group(3)} than {m.group(2)}{m.group(5)}"))
    # role swap: two determiner + noun phrases trade places ("the owner removes a co-owner")
    nps = list(re.finditer(rf"\b{_DETERMINERS} (\w+(?:-\w+)?)\b", text, flags=re.I))
    if len(nps) >= 2:
        i, j = sorted(rng.sample(range(len(nps)), 2))
        n1, n2 = nps[i].group(1), nps[j].group(1)
        if n1.lower() != n2.lower():
            new = text[:nps[i].start(1)] + n2 + text[nps[i].end(1):nps[j].start(1)] + n1 + text[nps[j].end(1):]
            options.append(("role", new))
    # role swap: "I charged my landlord" <-> "my landlord charged me"
    m = re.match(r"^(i) (\w+ed) (my|the) (\w+)(.*)$", text, flags=re.I)
    if m:
        options.append(("role", f"{_match_case(text, m.group(3))} {m.group(4)} {m.group(2)} me{m.group(5)}"))
    m = re.match(r"^(my|the) (\w+) (\w+ed) me\b(.*)$", text, flags=re.I)
    if m:
        options.append(("role", f"{_match_case(text, 'I')} {m.group(3)} {m.group(1).lower()} {m.group(2)}{m.group(4)}"))
    # numbers
    for i, w in enumerate(low):
        if re.fullmatch(r"\d+(\.\d+)?", w):
            n = float(w)
            m = n + rng.choice([1, 2, 5, 10]) if n < 10 else n * rng.choice([2, 3, 10]) if rng.random() < 0.5 else max(1, n // 2)
            m_text = str(int(m)) if float(m).is_integer() else str(m)
            new = words[:i] + [words[i].replace(re.sub(r"[^\d.]", "", words[i]), m_text)] + words[i + 1:]
            options.append(("numeric", " ".join(new)))
        elif w in _NUMBER_WORDS:
            other = rng.choice([x for x in _NUMBER_WORDS if x != w])
            options.append(("numeric", " ".join(words[:i] + [other] + words[i + 1:])))
    # role swap: "from X to Y" -> "from Y to X", "X to Y" after transfer-like verbs
    m = re.search(r"\bfrom (\w+(?: \w+)?) to (\w+(?: \w+)?)", text, flags=re.I)
    if m and m.group(1).lower() != m.group(2).lower():
        options.append(("role", text[:m.start()] + f"from {m.group(2)} to {m.group(1)}" + text[m.end():]))
    options = [(k, t) for k, t in options if t.strip() and t.strip().lower() != text.strip().lower()]
    if not options:
        return None
    kind = rng.choice(sorted({k for k, _ in options}))  # kinds equally likely, whatever their rule counts
    return rng.choice([o for o in options if o[0] == kind])


def reword(text: str, rng: random.Random) -> str | None:
    """One meaning-preserving rewrite of `text`, or None."""
    options = []
    for pattern, repl in _SAME_MEANING:
        if re.search(pattern, text, flags=re.I):
            options.append(re.sub(pattern, repl, text, count=1, flags=re.I))
    # the converse comparative keeps the meaning: "is A cheaper than B" == "is B pricier than A"
    m = re.search(r"\b(is|are|was|were) (.+?) (\w+er|more \w+) than (.+?)([?.!]*)$", text, flags=re.I)
    if m and m.group(3).lower() in _COMPARATIVE_OF and m.group(2).lower() != m.group(4).lower():
        opposite = _COMPARATIVE_OF[m.group(3).lower()]
        options.append(text[:m.start(2)] + f"{m.group(4)} {opposite} than {m.group(2)}{m.group(5)}")
    # "A and B" -> "B and A" between two determiner phrases: a symmetric swap, unlike a role swap
    m = re.search(rf"\b({_DETERMINERS} \w+) and ({_DETERMINERS} \w+)\b", text, flags=re.I)
    if m and m.group(1).lower() != m.group(2).lower():
        options.append(text[:m.start()] + f"{m.group(2)} and {m.group(1)}" + text[m.end():])
    stripped = text.rstrip("?.! ")
    options.append(stripped + "?" if stripped == text.strip() else stripped)
    options.append("please, " + text[:1].lower() + text[1:] if not text.lower().startswith("please") else text[8:])
    options = [o for o in options if o.strip() and o != text]
    return rng.choice(options) if options else None


def augmentation_pairs(texts: Sequence[str], max_pairs: int, rng: random.Random) -> list[LabelledPair]:
    """2/3 meaning-changing edits (label 0), 1/3 rewrites (label 1), from distinct source texts."""
    texts = list(dict.fromkeys(t for t in texts if 3 <= len(t.split()) <= 30))
    rng.shuffle(texts)
    out: list[LabelledPair] = []
    n_neg_target, n_pos_target = (2 * max_pairs) // 3, max_pairs // 3
    n_neg = n_pos = 0
    for text in texts:
        if n_neg < n_neg_target and (n_pos >= n_pos_target or rng.random() < 2 / 3):
            p = perturb(text, rng)
            if p is not None:
                out.append(LabelledPair(text, p[1], 0.0, f"augment-{p[0]}"))
                n_neg += 1
                continue
        if n_pos < n_pos_target:
            r = reword(text, rng)
            if r is not None:
                out.append(LabelledPair(text, r, 1.0, "augment-reword"))
                n_pos += 1
        if n_neg >= n_neg_target and n_pos >= n_pos_target:
            break
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


def build_phase_a(kb_paths: Sequence[str], pair_paths: Sequence[str], cfg: RerankTrainConfig,
                  embed=None) -> tuple[list[LabelledPair], list[LabelledPair], dict]:
    """(train pairs, held-out pairs, per-source counts)."""
    rng = random.Random(cfg.seed)
    train: list[LabelledPair] = []
    heldout: list[LabelledPair] = []
    counts: dict[str, dict[str, int]] = {}
    for path in pair_paths:
        pairs = read_pairs_file(path)
        if "msr-para-test" in str(path) or Path(path).name == "pairs_test.tsv" and "mrpc" in str(path):
            raise RerankTrainError(f"{path}: MRPC test pairs are in STS-B (MSRpar); the STS-B readme forbids training on them")
        rng.shuffle(pairs)
        n_hold = int(len(pairs) * cfg.holdout_fraction)
        heldout += pairs[:n_hold]
        train += pairs[n_hold:]
        counts[str(path)] = {"train": len(pairs) - n_hold, "heldout": n_hold}
    for path in kb_paths:
        groups = kb_groups(read_kb(path))
        source = Path(path).parent.name or Path(path).stem
        both = intent_pairs(groups, cfg.anchors_per_faq, rng, source, embed=embed)
        rng.shuffle(both)
        n_hold = int(len(both) * cfg.holdout_fraction)
        for pos, neg in both[:n_hold]:
            heldout += [pos, neg]
        for pos, neg in both[n_hold:]:
            train += [pos, neg]
        counts[str(path)] = {"train": 2 * (len(both) - n_hold), "heldout": 2 * n_hold}
    if cfg.augment and cfg.augment_max > 0:
        held_texts = {t for p in heldout for t in (p.q1, p.q2)}
        texts = [t for p in train for t in (p.q1, p.q2) if t not in held_texts]
        aug = augmentation_pairs(texts, cfg.augment_max, rng)
        train += aug
        by_kind: dict[str, int] = {}
        for p in aug:
            by_kind[p.source] = by_kind.get(p.source, 0) + 1
        counts["augment"] = by_kind
    if not train:
        raise RerankTrainError("no phase A training pairs: give --kb and/or --pairs")
    return train, heldout, counts


# ---------------------------------------------------------------------------------------------
# metrics and calibration
# ---------------------------------------------------------------------------------------------
def pearson_spearman(pred: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    from scipy.stats import pearsonr, spearmanr

    return float(pearsonr(pred, gold)[0]), float(spearmanr(pred, gold)[0])


# ---------------------------------------------------------------------------------------------
# the trainer
# ---------------------------------------------------------------------------------------------
def _batches(pairs: Sequence[LabelledPair], batch_size: int, seed: int) -> list[list[int]]:
    """Shuffled batches of similar length: shuffle, sort chunks of 50 batches by length, cut, shuffle."""
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    chunk = batch_size * 50
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start:start + chunk], key=lambda i: len(pairs[i].q1) + len(pairs[i].q2))
        batches += [part[j:j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


class RerankTrainer:
    def __init__(self, out: Path, cfg: RerankTrainConfig, train_a: list[LabelledPair], heldout: list[LabelledPair],
                 train_b: list[LabelledPair], dev_b: list[LabelledPair], device: str, resume: bool, meta: dict):
        import torch

        self.torch = torch
        self.out, self.cfg, self.device, self.meta = out, cfg, device, meta
        self.train_a, self.heldout, self.train_b, self.dev_b = train_a, heldout, train_b, dev_b
        from models.matchers.cross_encoder import BASES

        self.tokenizer = load_tokenizer(base=cfg.base)
        self.model_config = RerankerConfig(n_layers=cfg.n_layers, max_len=cfg.max_len, pooling=cfg.pooling,
                                           sts_head=cfg.sts_head, fusion_weight=cfg.fusion_weight,
                                           base=BASES[cfg.base]["name"])
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.module = build_module(self.model_config, init_from_base=True).to(device)
        if cfg.frozen_layers:
            if not 0 < cfg.frozen_layers < cfg.n_layers:
                raise RerankTrainError(f"frozen_layers must be in 0..{cfg.n_layers - 1}, got {cfg.frozen_layers}")
            body = self.module.bert
            for part in [body.embeddings, *body.encoder.layer[:cfg.frozen_layers]]:
                part.requires_grad_(False)
        self.phase = "A"
        self.epoch = 0
        self.step_in_epoch = 0
        self.step = 0  # within the phase
        self.planned: dict[str, int] = {}
        self.history: list[dict] = []
        self.elapsed_before = 0.0  # seconds spent by earlier (resumed) runs
        self.cpu_before = 0.0  # CPU seconds of this process's earlier (resumed) runs
        self.optimizer = self._optimizer(cfg.lr_a)
        if resume:
            path = out / CHECKPOINT_FILE
            if not path.exists():
                raise RerankTrainError(f"--resume: no checkpoint at {path}")
            ck = torch.load(path, map_location="cpu", weights_only=False)
            made = ck["train_config"]
            if (made["n_layers"], made["seed"], made.get("base", "minilm")) != (cfg.n_layers, cfg.seed, cfg.base):
                raise RerankTrainError("--resume: the checkpoint was made with another --base/--layers/--seed")
            self.module.load_state_dict(ck["model"])
            self.phase, self.epoch, self.step_in_epoch, self.step = ck["phase"], ck["epoch"], ck["step_in_epoch"], ck["step"]
            self.planned, self.history, self.elapsed_before = ck["planned"], ck["history"], ck["elapsed"]
            self.cpu_before = ck.get("cpu_seconds", 0.0)
            self.optimizer = self._optimizer(cfg.lr_a if self.phase == "A" else cfg.lr_b)
            self.optimizer.load_state_dict(ck["optimizer"])
            random.setstate(ck["rng"]["python"])
            torch.set_rng_state(ck["rng"]["torch"])
            log.info("resumed at phase %s epoch %d step %d", self.phase, self.epoch, self.step)

    def _optimizer(self, lr: float):
        decay, no_decay = [], []
        for name, p in self.module.named_parameters():
            if not p.requires_grad:
                continue
            (no_decay if p.ndim < 2 else decay).append(p)
        return self.torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr
        )

    def save_checkpoint(self) -> None:
        torch = self.torch
        ck = {
            "model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(), "phase": self.phase,
            "epoch": self.epoch, "step_in_epoch": self.step_in_epoch, "step": self.step, "planned": self.planned,
            "history": self.history, "elapsed": self.elapsed_before + (time.monotonic() - self.t_start),
            "cpu_seconds": self.cpu_before + (time.process_time() - self.cpu_start),
            "train_config": asdict(self.cfg), "rng": {"python": random.getstate(), "torch": torch.get_rng_state()},
        }
        tmp = self.out / (CHECKPOINT_FILE + ".tmp")
        torch.save(ck, tmp)
        os.replace(tmp, self.out / CHECKPOINT_FILE)

    def _tensors(self, pairs: Sequence[LabelledPair], idx: Sequence[int], swap_rng: random.Random | None):
        q1, q2 = [], []
        for i in idx:
            a, b = pairs[i].q1, pairs[i].q2
            if swap_rng is not None and swap_rng.random() < 0.5:  # the relation is symmetric
                a, b = b, a
            q1.append(a)
            q2.append(b)
        enc = encode_pairs(self.tokenizer, q1, q2, self.cfg.max_len)
        t = {k: self.torch.from_numpy(v).to(self.device) for k, v in enc.items()}
        y = self.torch.tensor([pairs[i].label for i in idx], dtype=self.torch.float32, device=self.device)
        return t, y

    def logits(self, pairs: Sequence[LabelledPair], batch_size: int = 128, head: int = 0) -> np.ndarray:
        torch = self.torch
        self.module.eval()
        out = np.zeros(len(pairs), dtype=np.float32)
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i].q1) + len(pairs[i].q2))
        with torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                t, _ = self._tensors(pairs, idx, None)
                out[idx] = self.module(t["input_ids"], t["attention_mask"], t["token_type_ids"])[:, head].float().cpu().numpy()
        self.module.train()
        return out

    def _lr(self, base: float, step: int, planned: int) -> float:
        warm = max(1, int(self.cfg.warmup * planned))
        if step < warm:
            return base * (step + 1) / warm
        return base * max(0.0, (planned - step) / max(1, planned - warm))

    def _phase_b_cost(self) -> float:
        """Cost of a phase B pair in phase A pairs: STS-B pairs are ~1.5x longer, plus the rehearsal pairs."""
        if not self.cfg.sts_head:
            return 1.5
        return 1.5 + (self.cfg.rehearse_batch or self.cfg.batch_b) / self.cfg.batch_b

    def _chunk_over(self) -> bool:
        return bool(self.cfg.stop_after_minutes) and time.monotonic() - self.t_start >= self.cfg.stop_after_minutes * 60

    def _remaining_s(self) -> float | None:
        if not self.cfg.max_minutes:
            return None
        return self.cfg.max_minutes * 60 - self.elapsed_before - (time.monotonic() - self.t_start)

    def run_phase(self, name: str, pairs: list[LabelledPair], epochs: int, batch: int, base_lr: float, loss_kind: str) -> None:
        torch = self.torch
        from tqdm import tqdm

        batches_per_epoch = len(_batches(pairs, batch, self.cfg.seed))
        full = batches_per_epoch * epochs
        if name == "A":
            self.full_a = full
        if name not in self.planned:
            self.planned[name] = full
        swap_rng = random.Random(self.cfg.seed * 1000 + self.step)
        # phase B rehearsal: phase A batches in their own order, one after every STS-B batch
        rehearse = loss_kind == "mse" and self.cfg.sts_head
        rehearsal = _batches(self.train_a, self.cfg.rehearse_batch or batch, self.cfg.seed + 104729) if rehearse else []
        self.module.train()
        bar = tqdm(total=self.planned[name], initial=self.step, unit="step", desc=f"phase {name}", file=sys.stderr,
                   mininterval=10, dynamic_ncols=True)
        t_phase, steps_timed, ema = time.monotonic(), 0, None
        t_window = t_phase
        windows: list[float] = []  # seconds per step of each timing window in this invocation
        while self.step < self.planned[name] and self.epoch < epochs:
            order = _batches(pairs, batch, self.cfg.seed + 7919 * self.epoch)
            while self.step_in_epoch < len(order) and self.step < self.planned[name]:
                idx = order[self.step_in_epoch]
                for g in self.optimizer.param_groups:
                    g["lr"] = self._lr(base_lr, self.step, self.planned[name])
                t, y = self._tensors(pairs, idx, swap_rng)
                out = self.module(t["input_ids"], t["attention_mask"], t["token_type_ids"])
                if loss_kind == "bce":
                    loss = torch.nn.functional.binary_cross_entropy_with_logits(out[:, 0], y)
                else:
                    loss = torch.nn.functional.mse_loss(torch.sigmoid(out[:, -1]), y)
                if rehearse:
                    ta, ya = self._tensors(self.train_a, rehearsal[self.step % len(rehearsal)], swap_rng)
                    out_a = self.module(ta["input_ids"], ta["attention_mask"], ta["token_type_ids"])
                    loss = loss + torch.nn.functional.binary_cross_entropy_with_logits(out_a[:, 0], ya)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.module.parameters(), 1.0)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.step += 1
                self.step_in_epoch += 1
                steps_timed += 1
                ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
                bar.update(1)
                bar.set_postfix(loss=f"{ema:.4f}", epoch=self.epoch + 1, refresh=False)
                # re-plan with the recent speed: other jobs on the machine come and go
                if name == "A" and (steps_timed == 20 or steps_timed % 100 == 0):
                    window = 20 if steps_timed == 20 else 100
                    windows.append((time.monotonic() - t_window) / window)
                    # the median window: a few minutes of another job on the machine must not cut phase A for good
                    self._plan_phase_a(batch, float(np.median(windows)))
                    t_window = time.monotonic()
                    bar.total = self.planned[name]
                if self.step % self.cfg.checkpoint_every == 0:
                    self.save_checkpoint()
                if self._chunk_over():
                    bar.close()
                    raise TrainingPaused(f"stopped after {self.cfg.stop_after_minutes} minutes at phase {name} step "
                                         f"{self.step} of {self.planned[name]}")
            if self.step_in_epoch >= len(order):
                self.epoch += 1
                self.step_in_epoch = 0
        bar.close()
        self.history.append({"phase": name, "steps": self.step, "planned_steps": self.planned[name],
                             "full_steps": full, "epochs": round(self.step / max(1, batches_per_epoch), 2),
                             "final_loss_ema": ema, "seconds": round(time.monotonic() - t_phase, 1),
                             # measured in this invocation only (a resumed phase started earlier)
                             "s_per_step": (time.monotonic() - t_phase) / steps_timed if steps_timed else None})

    def _plan_phase_a(self, batch_a: int, s_per_step: float) -> None:
        """Fit phase A into the budget next to phase B (STS-B pairs are ~1.5x longer than questions)."""
        remaining = self._remaining_s()
        if remaining is None:
            return
        s_per_pair = s_per_step / batch_a
        phase_b_s = len(self.train_b) * self.cfg.epochs_b * s_per_pair * self._phase_b_cost()
        # evaluations and calibration (a forward pass costs about a quarter of a training pair), export
        reserve = 120 + (len(self.heldout) + len(self.dev_b)) * s_per_pair / 4
        fit = int(max(0.0, remaining - phase_b_s - reserve) / s_per_step) + self.step
        new = max(self.step, min(fit, self.full_a))  # grows back when the machine gets quieter (or the budget larger)
        if new != self.planned["A"]:
            log.info("time budget: phase A planned for %d steps instead of %d (%.2fs/step)", new, self.planned["A"], s_per_step)
            self.planned["A"] = new

    def run(self) -> dict:
        cfg = self.cfg
        self.t_start = time.monotonic()
        self.cpu_start = time.process_time()
        try:
            if self.phase == "A":
                self.run_phase("A", self.train_a, cfg.epochs_a, cfg.batch_a, cfg.lr_a, "bce")
                logits = self.logits(self.heldout)
                labels = np.array([p.label for p in self.heldout])
                acc = float(np.mean((logits >= 0) == (labels >= 0.5))) if len(labels) else None
                self.history.append({"phase": "A", "heldout_accuracy": acc, "heldout_pairs": len(labels)})
                log.info("phase A done: held-out accuracy %s", acc)
                save_reranker(self.module, self.model_config, self.tokenizer, self.out / "phase_a")
                self.phase, self.epoch, self.step_in_epoch, self.step = "B", 0, 0, 0
                self.optimizer = self._optimizer(cfg.lr_b)
                remaining = self._remaining_s()
                speed_a = next((h["s_per_step"] for h in self.history if h.get("s_per_step")), None)
                if remaining is not None and speed_a:
                    s_per_step = speed_a * cfg.batch_b / cfg.batch_a * self._phase_b_cost()
                    full_b = math.ceil(len(self.train_b) / cfg.batch_b) * cfg.epochs_b
                    self.planned["B"] = max(1, min(full_b, int((remaining - 60) / s_per_step)))
                self.save_checkpoint()
            if self.phase == "B":
                self.run_phase("B", self.train_b, cfg.epochs_b, cfg.batch_b, cfg.lr_b, "mse")
                self.phase = "calibrate"
                self.save_checkpoint()
            return self.finish()
        except (KeyboardInterrupt, TrainingPaused) as exc:
            log.warning("%s: saving a checkpoint to %s (continue with --resume)",
                        str(exc) or "interrupted", self.out / CHECKPOINT_FILE)
            self.save_checkpoint()
            raise

    def finish(self) -> dict:
        sim = sigmoid(self.logits(self.dev_b, head=-1)) if self.dev_b else None
        stsb_dev = pearson_spearman(sim, np.array([p.label for p in self.dev_b])) if sim is not None else None
        logits = self.logits(self.heldout)
        labels = np.array([p.label for p in self.heldout])
        if len(labels) and 0 < labels.sum() < len(labels):
            a, b = fit_platt(logits, labels)
            calibration = {"a": a, "b": b, "source": f"platt on {len(labels)} held-out binary pairs ({HELDOUT_FILE})"}
        else:
            calibration = {"a": 1.0, "b": 0.0, "source": "identity (no held-out binary pairs)"}
        self.model_config.calibration = calibration
        summary = {
            "stsb_dev_pearson": stsb_dev[0] if stsb_dev else None,
            "stsb_dev_spearman": stsb_dev[1] if stsb_dev else None,
            "heldout_accuracy_after_b": float(np.mean((a * logits + b >= 0) == (labels >= 0.5))) if len(labels) else None,
            "calibration": calibration,
            "history": self.history,
            "train_config": asdict(self.cfg),
            "seconds": round(self.elapsed_before + time.monotonic() - self.t_start, 1),
            # wall-clock includes waiting for the CPU on a shared machine; this is the work itself
            "cpu_seconds": round(self.cpu_before + time.process_time() - self.cpu_start, 1),
            **self.meta,
        }
        save_reranker(self.module, self.model_config, self.tokenizer, self.out,
                      extra={"training": {k: summary[k] for k in ("stsb_dev_pearson", "stsb_dev_spearman", "seconds")}})
        written = export_onnx(self.out, quantize=True)
        summary["files"] = {p.name: p.stat().st_size for p in sorted(self.out.iterdir()) if p.is_file()}
        summary["onnx"] = [p.name for p in written]
        (self.out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
        self.phase = "done"
        self.save_checkpoint()
        return summary


def train_reranker(out: str | Path, kb_paths: Sequence[str] = (), pair_paths: Sequence[str] = (),
                   stsb_dir: str | Path | None = None, cfg: RerankTrainConfig | None = None, resume: bool = False,
                   device: str | None = None, command: str | None = None, embed=None) -> dict:
    """Build the data (or reuse it on --resume), train both phases, calibrate, save, export."""
    import torch

    from models.encoders.base import pick_device

    cfg = cfg or RerankTrainConfig()
    if not 0.0 <= cfg.fusion_weight <= 1.0:
        raise RerankTrainError(f"fusion_weight must be in [0, 1], got {cfg.fusion_weight}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = pick_device(device)
    if device == "cpu" and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(max(1, min(torch.get_num_threads(), int(os.environ.get("FAQ_TORCH_THREADS", "1")))))
    if stsb_dir is None:
        raise RerankTrainError("--stsb DIR (the folder with sts-train.csv / sts-dev.csv) is needed for phase B")
    stsb_dir = Path(stsb_dir)
    for name in ("sts-train.csv", "sts-dev.csv"):
        if not (stsb_dir / name).exists():
            raise RerankTrainError(f"{stsb_dir / name} not found")
    train_b = read_stsb(stsb_dir / "sts-train.csv")
    dev_b = read_stsb(stsb_dir / "sts-dev.csv")
    pairs_file, held_file, meta_file = out / PAIRS_A_FILE, out / HELDOUT_FILE, out / "data.json"
    if resume and pairs_file.exists() and held_file.exists():
        train_a, heldout = read_written_pairs(pairs_file), read_written_pairs(held_file)
        counts = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    else:
        if resume:
            raise RerankTrainError(f"--resume: {pairs_file} missing (the run never got past data preparation)")
        log.info("building phase A pairs ...")
        train_a, heldout, counts = build_phase_a(list(kb_paths), list(pair_paths), cfg, embed=embed)
        write_pairs(pairs_file, train_a)
        write_pairs(held_file, heldout)
        meta_file.write_text(json.dumps(counts, indent=2) + "\n")
    log.info("phase A: %d pairs (%d held out), phase B: %d STS-B pairs", len(train_a), len(heldout), len(train_b))
    meta = {"command": command, "device": device, "torch_threads": torch.get_num_threads(),
            "data": {"phase_a": counts, "phase_a_pairs": len(train_a), "heldout_pairs": len(heldout),
                     "phase_b_pairs": len(train_b), "stsb_dir": str(stsb_dir)}}
    trainer = RerankTrainer(out, cfg, train_a, heldout, train_b, dev_b, device, resume, meta)
    return trainer.run()
