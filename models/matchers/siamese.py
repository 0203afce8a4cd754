"""The Siamese short-text matcher ("Siamese Networks for Semantic Pattern Similarity" style, CIKM AnalytiCup
2018: "a Siamese network with CNNs, an LSTM and a BiLSTM", section 4). Reading order = data flow:

    normalise_tokens   lower case, accents, punctuation, numbers, OOV repair, <= 60 tokens       list[str]
    word vectors       tokens -> (len, d) frozen rows, outside the nn.Module (models/encoders/words.py GloveWords;
                       "minilm": MiniLMWords, frozen wordpiece states of the normalised text: ours)
    SiameseEncoder     one encoder for both sentences; variants (parallel extractors, concatenated):
        lstm               LSTM, last state                                   (B,T,d) -> (B,h)
        conv               Conv1D kernels 1/2/3, ReLU, max over time          (B,T,d) -> (B,3f)
        conv_lstm          [conv; lstm]                                       (B,T,d) -> (B,3f+h)
        conv_lstm_bilstm   [conv; lstm; bilstm (last states, both ways)]      (B,T,d) -> (B,3f+3h)
        + mean_pool        (ours) the L2-normalised masked mean of the word vectors appended to u  (+d):
                           with MiniLM states that is the sentence embedding MiniLM's cosine compares
    MatchHead          [u - v; u * v] -> (Linear, BatchNorm, ReLU, Dropout) x 2 -> Linear -> logit
                       (B,2D) -> (B,); the logit is averaged over both orders, so score(a, b) = score(b, a)
    log loss           binary cross-entropy on the logit

The paper uses fastText 300-d vectors (not installable here): we use GloVe 6B-50d. Sizes it leaves open
(filters, hidden units of the MLP, dropout) are `SiameseConfig` fields; the LSTM size is one of its 32 / 64 /
128. The model folder (`SiameseScorer.save`, `load_siamese`) is at the end of this module.
"""
from __future__ import annotations

import dataclasses
import os
import re
import string
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from models.calibration import Calibration, read_calibration, write_calibration
from models.encoders.words import WORD_DIMS, make_words, pad_states
from models.folder import load_weights, read_model_config, write_json

ENCODERS = ("lstm", "conv", "conv_lstm", "conv_lstm_bilstm")
KERNELS = (1, 2, 3)
FORMAT_VERSION = 1
ARCHITECTURE = "siamese"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WORDS_FILE = "text.json"
MAX_TOKENS = 60


@dataclass
class SiameseConfig:
    #: "lstm", "conv", "conv_lstm" or "conv_lstm_bilstm" (paper: Table 2's four siamese rows)
    encoder: str = "conv"
    #: "glove" (GloVe 6B-50d; the paper: fastText 300-d) or "minilm" (ours: frozen MiniLM token states)
    word_repr: str = "glove"
    #: filters per kernel size (ours; the paper does not say)
    filters: int = 64
    #: LSTM / BiLSTM units per direction (paper: tried 32, 64, 128)
    hidden: int = 64
    #: units of each of the MLP's two hidden layers (ours)
    mlp_hidden: int = 128
    #: dropout after each hidden layer of the MLP (paper: "Dropout", rate not given)
    dropout: float = 0.3
    #: tokens kept per sentence (paper: 60 after trying 50, 60, 70)
    max_len: int = MAX_TOKENS
    #: (ours) append the L2-normalised mean of the word vectors to the sentence vector, so the head also
    #: sees what a plain cosine of mean-pooled vectors sees (the MiniLM sentence embedding for "minilm")
    mean_pool: bool = False

    def __post_init__(self) -> None:
        if self.encoder not in ENCODERS:
            raise ValueError(f"SiameseConfig.encoder must be one of {', '.join(ENCODERS)}, got {self.encoder!r}")
        if self.word_repr not in WORD_DIMS:
            raise ValueError(f"SiameseConfig.word_repr must be one of {', '.join(WORD_DIMS)}, got {self.word_repr!r}")
        for name in ("filters", "hidden", "mlp_hidden", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SiameseConfig.{name} must be a positive int, got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"SiameseConfig.dropout must be in [0, 1), got {self.dropout}")
        if not isinstance(self.mean_pool, bool):
            raise ValueError(f"SiameseConfig.mean_pool must be true or false, got {self.mean_pool!r}")

    @property
    def word_dim(self) -> int:
        return WORD_DIMS[self.word_repr]

    @property
    def dim(self) -> int:
        """Width of the sentence vector u."""
        parts = {"lstm": self.hidden, "conv": len(KERNELS) * self.filters,
                 "conv_lstm": len(KERNELS) * self.filters + self.hidden,
                 "conv_lstm_bilstm": len(KERNELS) * self.filters + 3 * self.hidden}
        return parts[self.encoder] + (self.word_dim if self.mean_pool else 0)

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


# ------------------------------------------------------------------------------------------------
# normalisation (paper 3.1 and 4: lower casing, stripping punctuation, fixes for out-of-vocabulary terms)

_NUMBER_RE = re.compile(r"^\d{1,3}(,\d{3})+(\.\d+)?$")
_PUNCT = set(string.punctuation) | {"``", "''", "...", "--"}
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _is_punct(token: str) -> bool:
    return token in _PUNCT or all(ch in _PUNCT for ch in token)


def _edits1(word: str) -> set[str]:
    """Every spelling one deletion, transposition, substitution or insertion away (a-z only)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deletes = [a + b[1:] for a, b in splits if b]
    transposes = [a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1]
    replaces = [a + c + b[1:] for a, b in splits if b for c in _LETTERS]
    inserts = [a + c + b for a, b in splits for c in _LETTERS]
    return set(deletes + transposes + replaces + inserts)


def repair_oov(token: str, vocab: Mapping[str, int]) -> list[str]:
    """A token the vocabulary lacks -> the tokens to use instead. Rules, first that applies:
    1. a hyphen / apostrophe compound whose parts are known: the parts ("e-mail" stays if known);
    2. an alphabetic word of 4+ letters: the most frequent known spelling one edit away (`vocab` maps a word
       to its frequency rank, lower = more frequent; GloVe's row order), so typos like "recieve" -> "receive";
    3. otherwise the token unchanged: the word representation gives it a fixed vector seeded by its spelling,
       so the same unknown name in both questions still matches itself.
    Short words are never edited: at 3 letters almost every edit is another real word."""
    if token in vocab:
        return [token]
    if re.search(r"[-']", token):
        parts = [p for p in re.split(r"[-']", token) if p]
        if parts and all(p in vocab for p in parts):
            return parts
    if token.isalpha() and token.isascii() and len(token) >= 4:
        known = [w for w in _edits1(token) if w in vocab]
        if known:
            return [min(known, key=lambda w: (vocab[w], w))]
    return [token]


def normalise_tokens(text: str, vocab: Mapping[str, int] | None = None, max_len: int = MAX_TOKENS) -> list[str]:
    """A sentence -> at most `max_len` tokens: NFKC, accents stripped, lower case (models/text.py), GloVe-style
    tokens with punctuation-only tokens dropped, thousands separators removed ("10,000" -> "10000": GloVe
    knows the plain form), then `repair_oov` when a vocabulary is given.

    >>> normalise_tokens("What's the CAFÉ's Wi-Fi password?!")
    ['what', "'s", 'the', 'cafe', "'s", 'wi-fi', 'password']
    """
    from models.text import tokenize

    out: list[str] = []
    for token in tokenize(text):
        if _is_punct(token):
            continue
        if _NUMBER_RE.match(token):
            token = token.replace(",", "")
        out.extend(repair_oov(token, vocab) if vocab is not None else [token])
        if len(out) >= max_len:
            break
    return out[:max_len]


def vocab_of(words: Any) -> Mapping[str, int] | None:
    """The rank map OOV repair looks words up in: GloVe's index, a test's `vocab`, or None (wordpieces)."""
    glove = getattr(words, "glove", None)
    if glove is not None:
        return glove.index
    return getattr(words, "vocab", None)


# ------------------------------------------------------------------------------------------------
# the network


def _last_states(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B,T,d) -> (B, directions*h): each direction's state after the last real step (packed, so padding
    never enters); an empty sentence gives zeros."""
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
    _, (h, _) = lstm(packed)  # h: (directions, B, h)
    out = torch.cat(list(h), dim=-1)
    return torch.where(lengths.unsqueeze(1) > 0, out, torch.zeros_like(out))


class ConvExtractor(nn.Module):
    """(B,T,d) -> (B, 3f): one Conv1D per kernel size, ReLU, max over the real positions. Padding is on the
    left only (k - 1 zeros), so position t sees words t-k+1..t and never a padded step after the text."""

    def __init__(self, word_dim: int, filters: int):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(word_dim, filters, k) for k in KERNELS])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        xt = (x * mask.unsqueeze(-1)).transpose(1, 2)  # (B,d,T)
        pooled = []
        for conv, k in zip(self.convs, KERNELS):
            h = F.relu(conv(F.pad(xt, (k - 1, 0))))  # (B,f,T)
            h = h.masked_fill(~mask.unsqueeze(1), 0.0)  # ReLU >= 0, so 0 never beats a real position
            pooled.append(h.max(dim=2).values)
        return torch.cat(pooled, dim=1)


class SiameseEncoder(nn.Module):
    """Word vectors (B,T,d) + bool mask (B,T) -> sentence vectors (B, config.dim); the same weights for both
    sentences of a pair."""

    def __init__(self, config: SiameseConfig):
        super().__init__()
        self.config = config
        parts = config.encoder.split("_")
        self.conv = ConvExtractor(config.word_dim, config.filters) if "conv" in parts else None
        self.lstm = nn.LSTM(config.word_dim, config.hidden, batch_first=True) if "lstm" in parts else None
        self.bilstm = (nn.LSTM(config.word_dim, config.hidden, batch_first=True, bidirectional=True)
                       if "bilstm" in parts else None)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(dim=1)
        out = []
        if self.conv is not None:
            out.append(self.conv(x, mask))
        if self.lstm is not None:
            out.append(_last_states(self.lstm, x, lengths))
        if self.bilstm is not None:
            out.append(_last_states(self.bilstm, x, lengths))
        if self.config.mean_pool:
            summed = (x * mask.unsqueeze(-1)).sum(dim=1)  # (B,d)
            out.append(F.normalize(summed / lengths.clamp(min=1).unsqueeze(1), dim=1))
        return torch.cat(out, dim=1)


def pair_features(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """[u - v; u * v]   (B,D), (B,D) -> (B,2D)."""
    return torch.cat([u - v, u * v], dim=1)


class MatchHead(nn.Module):
    """(B,2D) pair features -> (B,) logit: two hidden layers, each Linear -> BatchNorm -> ReLU -> Dropout."""

    def __init__(self, config: SiameseConfig):
        super().__init__()
        layers: list[nn.Module] = []
        width = 2 * config.dim
        for _ in range(2):
            layers += [nn.Linear(width, config.mlp_hidden), nn.BatchNorm1d(config.mlp_hidden), nn.ReLU(),
                       nn.Dropout(config.dropout)]
            width = config.mlp_hidden
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.mlp(features).squeeze(-1)


class SiameseMatcher(nn.Module):
    def __init__(self, config: SiameseConfig):
        super().__init__()
        self.config = config
        self.encoder = SiameseEncoder(config)
        self.head = MatchHead(config)

    def forward(self, a: torch.Tensor, a_mask: torch.Tensor, b: torch.Tensor, b_mask: torch.Tensor) -> torch.Tensor:
        """(B,Ta,d), (B,Ta), (B,Tb,d), (B,Tb) -> (B,) logits."""
        return self.compare(self.encoder(a, a_mask), self.encoder(b, b_mask))

    def compare(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Sentence vectors (B,D), (B,D) -> (B,) logits. u - v is antisymmetric, so the MLP sees both orders
        (one batch: BatchNorm statistics stay shared) and the logits are averaged: a matcher whose answer
        depends on which question came first would be wrong half the time on one of the orders. Split from
        `forward` because a served KB's sentence vectors are computed once, at index build time."""
        n = u.size(0)
        logits = self.head(torch.cat([pair_features(u, v), pair_features(v, u)], dim=0))
        return 0.5 * (logits[:n] + logits[n:])

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def log_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """-mean[y log p + (1 - y) log(1 - p)], p = sigmoid(logit)."""
    return F.binary_cross_entropy_with_logits(logits, labels.float())


# ------------------------------------------------------------------------------------------------
# the scorer and its model folder


class SiameseScorer:
    """A SiameseMatcher with its word representation: text pairs in, probabilities out. Word vectors are
    memoised per text (unbounded: training and evaluations re-read the same sentences every epoch)."""

    def __init__(self, model: SiameseMatcher, words: Any, calibration: Calibration | None = None,
                 name: str = "siamese", device: str | None = None, states: dict[str, torch.Tensor] | None = None):
        self.model = model
        self.words = words
        self.calibration = calibration or Calibration()
        self.name = name
        self.device = torch.device(device or "cpu")
        self.model.to(self.device)
        self.vocab = vocab_of(words)
        # word vectors by text; `states` shares one dict between scorers over the same texts
        self.word_cache: dict[str, torch.Tensor] = {} if states is None else states
        self._vector_key: str | None = None

    @property
    def config(self) -> SiameseConfig:
        return self.model.config

    @property
    def id(self) -> str:
        return f"siamese-{self.config.encoder}-{self.config.word_repr}:{self.name}"

    def tokens(self, text: str) -> list[str]:
        return normalise_tokens(text, self.vocab, self.config.max_len)

    def states(self, texts: Sequence[str]) -> list[torch.Tensor]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.word_cache))
        if missing:
            normalised = [" ".join(self.tokens(t)) for t in missing]
            for text, s in zip(missing, self.words.states(normalised, self.config.max_len)):
                self.word_cache[text] = s.to(torch.float32)
        return [self.word_cache[t] for t in texts]

    def inputs(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        x, mask = pad_states(self.states(texts), self.config.word_dim)
        return x.to(self.device), mask.to(self.device)

    def logits(self, pairs: Sequence[tuple[str, str]]) -> torch.Tensor:
        """(B,) logits with gradients (training mode is the caller's)."""
        a, a_mask = self.inputs([p[0] for p in pairs])
        b, b_mask = self.inputs([p[1] for p in pairs])
        return self.model(a, a_mask, b, b_mask)

    def raw_scores(self, pairs: Sequence[tuple[str, str]], batch_size: int = 512) -> np.ndarray:
        """The network's logits in eval mode (no dropout, BatchNorm running statistics)."""
        was_training = self.model.training
        self.model.eval()
        out = []
        try:
            with torch.inference_mode():
                for start in range(0, len(pairs), batch_size):
                    out.append(self.logits(pairs[start:start + batch_size]).float().cpu().numpy())
        finally:
            self.model.train(was_training)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def score_pairs(self, pairs: Sequence[tuple[str, str]], batch_size: int = 512) -> np.ndarray:
        """P(the two texts mean the same) per pair: the calibrated sigmoid of the logit, float32 (n,)."""
        return self.probability(self.raw_scores(pairs, batch_size))

    def probability(self, raw: np.ndarray) -> np.ndarray:
        """Logits -> calibrated probabilities, float32."""
        return self.calibration.prob(raw).astype(np.float32)

    # -- serving: one side's sentence vectors computed ahead (a KB's phrasings at index build time) --

    def sentence_vectors(self, texts: Sequence[str], batch_size: int = 256, memo: bool = False) -> np.ndarray:
        """(n, config.dim) float32 encoder outputs u. `memo` keeps the texts' word vectors (training and
        evaluation re-read texts; a service does not: its queries are new and its KB is stored)."""
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                chunk = list(texts[start:start + batch_size])
                if memo:
                    x, mask = self.inputs(chunk)
                else:
                    normalised = [" ".join(self.tokens(t)) for t in chunk]
                    states = [s.to(torch.float32) for s in self.words.states(normalised, self.config.max_len)]
                    x, mask = pad_states(states, self.config.word_dim)
                    x, mask = x.to(self.device), mask.to(self.device)
                out.append(self.model.encoder(x, mask).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.config.dim), dtype=np.float32)

    def compare_vectors(self, u: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """One query's u (D,) against candidates' vectors (n, D) -> (n,) calibrated probabilities: the head
        alone, a few hundred thousand multiply-adds per candidate."""
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float32)
        was_training = self.model.training
        self.model.eval()  # BatchNorm's running statistics, no dropout
        try:
            with torch.inference_mode():
                v = torch.from_numpy(np.ascontiguousarray(candidates, dtype=np.float32)).to(self.device)
                q = torch.from_numpy(np.ascontiguousarray(u, dtype=np.float32)).to(self.device).expand_as(v)
                raw = self.model.compare(q, v).float().cpu().numpy()
        finally:
            self.model.train(was_training)
        return self.probability(raw)

    @property
    def vector_key(self) -> str:
        """Names the sentence vectors this model computes: a hash of its config and weights, so vectors
        stored with an index build are only ever read back by the model that wrote them."""
        import hashlib

        if self._vector_key is None:
            h = hashlib.sha256(repr(sorted(dataclasses.asdict(self.config).items())).encode())
            h.update(repr(sorted(self.words.meta().items())).encode())
            for name, tensor in sorted(self.model.encoder.state_dict().items()):
                h.update(name.encode())
                h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
            self._vector_key = f"siamese-{h.hexdigest()[:16]}"
        return self._vector_key

    def save(self, directory: str | Path) -> Path:
        """config.json, model.safetensors, text.json (which word vectors: a reference, never the vectors),
        calibration.json."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in self.model.state_dict().items()}
        tmp = directory / (WEIGHTS_FILE + ".tmp")
        save_file(tensors, str(tmp), metadata={"format_version": str(FORMAT_VERSION)})
        os.replace(tmp, directory / WEIGHTS_FILE)
        write_json(directory / CONFIG_FILE,
                    {"format_version": FORMAT_VERSION, "architecture": ARCHITECTURE, **dataclasses.asdict(self.config)})
        write_json(directory / WORDS_FILE, {"format_version": FORMAT_VERSION, **self.words.meta()})
        write_calibration(directory, self.calibration)
        self.name = directory.resolve().name
        self._vector_key = None
        return directory


def read_config(path: str | Path) -> SiameseConfig:
    meta = read_model_config(path, FORMAT_VERSION, ARCHITECTURE)
    unknown = sorted(set(meta) - SiameseConfig.field_names())
    if unknown:
        raise ValueError(f"{path}: unknown SiameseConfig fields {unknown}")
    return SiameseConfig(**meta)


def load_siamese(directory: str | Path, device: str | None = None, words: Any = None,
                 runtime: str = "torch", states: dict[str, torch.Tensor] | None = None,
                 cache_dir: str | Path | None = None) -> SiameseScorer:
    """A model folder (`faq train siamese`) -> a `SiameseScorer` in eval mode; `words` reuses a loaded word
    representation of the same kind; `runtime` runs MiniLM's states ("torch", "onnx": fp32 ONNX Runtime,
    the same numbers faster on a CPU); `states` shares word vectors by text with other scorers of the same
    word representation (`SiameseScorer`)."""
    directory = Path(directory)
    config = read_config(directory / CONFIG_FILE)
    weights = directory / WEIGHTS_FILE
    if words is None:
        words = make_words(config.word_repr, device=device or "cpu", runtime=runtime, cache_dir=cache_dir)
    model = SiameseMatcher(config)
    load_weights(model, weights)
    model.eval()
    return SiameseScorer(model, words, read_calibration(directory), name=directory.resolve().name, device=device,
                         states=states)

