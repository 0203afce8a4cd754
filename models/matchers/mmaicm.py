"""MMAICM: the attentive interactive convolutional matching network of "Multi-modal Attentive
Interactive Convolutional Matching for CQA" (section 3), text modalities only, and K-NRM, the paper's
strongest baseline, on the same word representations.

A question q and an answer a -> one match score in [-1, 1]. Unlike MSEM (one vector per sentence), the
network reads both word sequences at once, so it re-scores a short candidate list; it cannot index.
Reading order = data flow:

    word representations  Mq (B,Tq,d), Ma (B,Ta,d), frozen (models/encoders/words.py)         (3.2)
        GloveWords        "glove": GloVe 6B-50d rows of the models/text.py tokens (paper: word vectors)
        MiniLMWords       "minilm" (ours): all-MiniLM-L6-v2's frozen last-layer wordpiece states
    InteractionMatrix     S = cos(Mq_i, Ma_j)                       (B,Tq,Ta)                (1)
    InteractionAttention  Zq = Mq W_q + α 1 u_qᵀ, Za = Ma W_a + α 1 u_aᵀ                      (5), (6)
                          A = row-softmax(Zq Zaᵀ), SA = S ∘ A       (B,Tq,Ta)                (7), (8)
    ConvMatcher           2x2 and 3x3 branches: conv, max-pool, conv, max-pool, flatten -> h  (3.5)
                          score = tanh((h W1 + b1) W2 + b2)                                  (9)
    hinge_loss            max(0, 1 - score(q, a+) + score(q, a-))                           (10)
    KernelPooling         `matcher="knrm"`: RBF kernels over S, log-sum pooling, a linear layer (K-NRM)

Social context: the paper's u_q, u_a come from a meta-path embedding of users and tags. Here they are
two learned vectors (`context="learned"`), or callers pass their own (`context_q=`, `context_a=`, e.g.
from tags). Under the row softmax only u_q matters: Zq_i·Za_j = q_i·a_j + α u_q·a_j + (terms constant
in j, which the softmax over j cancels), so u_q learns which answer words deserve attention and u_a
has no effect at all. FAQ tags are therefore not used: a served query carries none, and the answer's
side cannot move the attention.

Padding: every input is cut or padded to `max_q_len` x `max_a_len` so the flattened CNN features have
a fixed size (the paper flattens them) and a pair's score never depends on its batch-mates. Padding
is zero in S and in SA, so it looks like "no similarity".

The model folder and `load_mmaicm(folder)` (an `MmaicmScorer`: texts in, raw scores and calibrated
probabilities out) are at the end of this module. Where the paper is silent the choice is ours; each
such `MmaicmConfig` field says so.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from models.calibration import Calibration, read_calibration, write_calibration
from models.encoders.words import WORD_DIMS, GloveWords, MiniLMWords, make_words, pad_states
from models.folder import load_weights, read_model_config, write_json
from models.lru import LRU

MATCHERS = ("cnn", "knrm")
CONTEXTS = ("learned", "none")
FORMAT_VERSION = 1
ARCHITECTURE = "mmaicm"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WORDS_FILE = "text.json"


@dataclass
class MmaicmConfig:
    # ---- word representation (3.2)
    #: "glove" = GloVe 6B-50d (paper-like: pretrained word vectors; the paper's d = 150 is not installable
    #: offline); "minilm" (ours) = the frozen packaged all-MiniLM-L6-v2's wordpiece states ([CLS]/[SEP] dropped)
    word_repr: str = "glove"
    #: ours: tokens (glove) or wordpieces (minilm) kept per question / answer; the CNN input is always
    #: max_q_len x max_a_len (WikiQA: 99% of questions <= 16 tokens, 90% of answers <= 42)
    max_q_len: int = 24
    max_a_len: int = 48
    # ---- matcher
    #: "cnn" = MMAICM (3.5); "knrm" = the K-NRM baseline (kernel pooling over S, no attention, no CNN)
    matcher: str = "cnn"
    # ---- attentive interaction matrix (3.4)
    #: False = the paper's "MMAICM-NoAttention": S itself goes to the CNN
    use_attention: bool = True
    #: width of Zq, Za; None = d (paper: W_q, W_a are d x d)
    attn_dim: int | None = None
    #: weight of the context vectors in (5), (6) (paper: 0.05; 0 = "MMAICM-NoSocial")
    alpha: float = 0.05
    #: "learned" (ours: the paper learns u_q, u_a from a social network we do not have) or "none"
    context: str = "learned"
    #: ours: softmax logits divided by sqrt(attn_dim) (paper: unscaled); 384-d states otherwise give
    #: one-hot rows at initialisation
    attn_scaled: bool = True
    #: ours: A multiplied by the answer's length, so uniform attention leaves S unchanged and SA has the
    #: same scale for short and long answers (paper: A's rows sum to 1)
    attn_rescale: bool = True
    #: ours: "random" (PyTorch's default for W_q, W_a) or "neutral": W_a starts at zero, so A starts
    #: uniform and the model starts as MMAICM-NoAttention, moving away only where the data asks
    attn_init: str = "random"
    # ---- convolutional matching network (3.5)
    kernels: tuple[int, ...] = (2, 3)  # paper: one sub-network per window size
    filters: int = 16  # ours: feature maps per convolution (both layers)
    pool: int = 2  # ours: max-pooling window (both layers)
    fc_hidden: int = 64  # ours: width of W1 in (9)
    dropout: float = 0.2  # ours: on h, before (9)
    # ---- objective (10)
    margin: float = 1.0  # paper
    # ---- K-NRM (Xiong et al. 2017, their values)
    knrm_kernels: int = 11  # one exact-match kernel (mu = 1) + mus 0.9, 0.7, .., -0.9
    knrm_sigma: float = 0.1
    knrm_exact_sigma: float = 1e-3

    def __post_init__(self) -> None:
        self.kernels = tuple(self.kernels)
        if self.word_repr not in WORD_DIMS:
            raise ValueError(f"MmaicmConfig.word_repr must be one of {', '.join(WORD_DIMS)}, got {self.word_repr!r}")
        if self.matcher not in MATCHERS:
            raise ValueError(f"MmaicmConfig.matcher must be one of {', '.join(MATCHERS)}, got {self.matcher!r}")
        if self.attn_init not in ("random", "neutral"):
            raise ValueError(f"MmaicmConfig.attn_init must be 'random' or 'neutral', got {self.attn_init!r}")
        if self.context not in CONTEXTS:
            raise ValueError(f"MmaicmConfig.context must be one of {', '.join(CONTEXTS)}, got {self.context!r}")
        for name in ("max_q_len", "max_a_len", "filters", "pool", "fc_hidden", "knrm_kernels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MmaicmConfig.{name} must be a positive int, got {value!r}")
        if self.attn_dim is not None and (not isinstance(self.attn_dim, int) or self.attn_dim < 1):
            raise ValueError(f"MmaicmConfig.attn_dim must be None or a positive int, got {self.attn_dim!r}")
        if not self.kernels or any(not isinstance(k, int) or k < 1 for k in self.kernels):
            raise ValueError(f"MmaicmConfig.kernels must be positive ints, got {self.kernels!r}")
        if self.knrm_kernels < 2:
            raise ValueError(f"MmaicmConfig.knrm_kernels must be >= 2, got {self.knrm_kernels}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"MmaicmConfig.dropout must be in [0, 1), got {self.dropout}")
        if self.alpha < 0 or self.margin <= 0 or self.knrm_sigma <= 0 or self.knrm_exact_sigma <= 0:
            raise ValueError("MmaicmConfig: alpha must be >= 0; margin and the K-NRM sigmas > 0")
        if self.matcher == "cnn" and min(self._branch_sizes()) == 0:
            raise ValueError(f"MmaicmConfig: a {self.max_q_len}x{self.max_a_len} interaction matrix is too small for "
                             f"kernels {self.kernels} with pool {self.pool}")

    @property
    def word_dim(self) -> int:
        """d: the width of the word vectors the word representation produces."""
        return WORD_DIMS[self.word_repr]

    @property
    def z_dim(self) -> int:
        return self.attn_dim if self.attn_dim is not None else self.word_dim

    def _branch_sizes(self) -> list[int]:
        """Flattened features of each CNN branch."""
        sizes = []
        for n in self.kernels:
            h, w = self.max_q_len, self.max_a_len
            for _ in range(2):  # conv (valid) then max-pool, twice
                h, w = (h - n + 1) // self.pool, (w - n + 1) // self.pool
            sizes.append(max(h, 0) * max(w, 0) * self.filters)
        return sizes

    def _feature_size(self) -> int:
        return sum(self._branch_sizes())

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


# ------------------------------------------------------------------------------------------------
# interactions (3.2, 3.4)


class InteractionMatrix(nn.Module):
    """S(q, a)[i, j] = cos(Mq_i, Ma_j)   (1); 0 where either word is padding."""

    def forward(self, q: torch.Tensor, q_mask: torch.Tensor, a: torch.Tensor, a_mask: torch.Tensor) -> torch.Tensor:
        """(B,Tq,d), (B,Tq), (B,Ta,d), (B,Ta) -> (B,Tq,Ta)."""
        s = F.normalize(q, dim=-1, eps=1e-8) @ F.normalize(a, dim=-1, eps=1e-8).transpose(1, 2)
        return s * (q_mask.unsqueeze(2) & a_mask.unsqueeze(1))


class InteractionAttention(nn.Module):
    """The social-aware attention matrix A (7) from both word matrices and the context vectors (5), (6);
    `forward` returns A (B,Tq,Ta), rows over the answer's real words, 0 at padding."""

    def __init__(self, config: MmaicmConfig):
        super().__init__()
        d, z = config.word_dim, config.z_dim
        self.w_q = nn.Linear(d, z, bias=False)  # W_q^A
        self.w_a = nn.Linear(d, z, bias=False)  # W_a^A
        if config.attn_init == "neutral":
            nn.init.zeros_(self.w_a.weight)
        self.alpha = config.alpha
        self.u_q = nn.Parameter(torch.randn(z) / math.sqrt(z)) if config.context == "learned" else None
        self.u_a = nn.Parameter(torch.randn(z) / math.sqrt(z)) if config.context == "learned" else None
        self.scale = 1.0 / math.sqrt(z) if config.attn_scaled else 1.0
        self.rescale = config.attn_rescale

    def forward(self, q: torch.Tensor, q_mask: torch.Tensor, a: torch.Tensor, a_mask: torch.Tensor,
                context_q: torch.Tensor | None = None, context_a: torch.Tensor | None = None) -> torch.Tensor:
        """q (B or 1, Tq, d), a (B, Ta, d) -> A (B, Tq, Ta); a question batch of 1 broadcasts."""
        z_q = self.w_q(q)  # (B,Tq,z)
        u_q = context_q if context_q is not None else self.u_q
        u_a = context_a if context_a is not None else self.u_a
        if u_q is not None:
            z_q = z_q + self.alpha * _per_row(u_q, z_q)  # (5)
        # Zq Zaᵀ with Za = Ma W_aᵀ + α 1 u_aᵀ (6), associated as (Zq W_a) Maᵀ + α Zq u_a: the same numbers,
        # but nothing is projected per answer word, which is most of the cost when one query meets
        # many candidates (Tq < Ta)
        logits = (z_q @ self.w_a.weight) @ a.transpose(1, 2)  # (B,Tq,Ta)
        if u_a is not None:
            logits = logits + self.alpha * (z_q * _per_row(u_a, z_q)).sum(dim=-1, keepdim=True)
        logits = logits * self.scale
        # a finite fill keeps an empty answer's rows free of NaN; they are zeroed just below
        logits = logits.masked_fill(~a_mask.unsqueeze(1), -1e9)
        attention = torch.softmax(logits, dim=-1)  # (7), row-level
        if self.rescale:
            attention = attention * a_mask.sum(dim=1).clamp(min=1).to(attention.dtype)[:, None, None]
        return attention * (q_mask.unsqueeze(2) & a_mask.unsqueeze(1))


def _per_row(u: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """A context vector (z,) or one per pair (B, z) -> broadcastable over z's (B, T, z)."""
    if u.dim() == 1:
        return u.view(1, 1, -1)
    if u.dim() != 2 or u.size(0) not in (1, z.size(0)) or u.size(1) != z.size(2):
        raise ValueError(f"context vectors must be ({z.size(2)},) or ({z.size(0)}, {z.size(2)}), got {tuple(u.shape)}")
    return u.unsqueeze(1)


# ------------------------------------------------------------------------------------------------
# matching networks (3.5, and the K-NRM baseline)


class ConvBranch(nn.Module):
    """One n x n sub-network: conv -> ReLU -> max-pool -> conv -> ReLU -> max-pool -> flatten; n-gram
    pairs in the first layer, their arrangement in the second."""

    def __init__(self, n: int, filters: int, pool: int):
        super().__init__()
        self.conv1 = nn.Conv2d(1, filters, n)
        self.conv2 = nn.Conv2d(filters, filters, n)
        self.pool = nn.MaxPool2d(pool)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B,1,Tq,Ta) -> (B, features)."""
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return x.flatten(1)


class ConvMatcher(nn.Module):
    """The attentive interactive convolutional matching network: 2x2 and 3x3 branches side by side,
    their features concatenated into h, score = tanh((h W1 + b1) W2 + b2)   (9)."""

    def __init__(self, config: MmaicmConfig):
        super().__init__()
        self.branches = nn.ModuleList(ConvBranch(n, config.filters, config.pool) for n in config.kernels)
        self.dropout = nn.Dropout(config.dropout)
        self.fc1 = nn.Linear(config._feature_size(), config.fc_hidden)
        self.fc2 = nn.Linear(config.fc_hidden, 1)

    def forward(self, sa: torch.Tensor) -> torch.Tensor:
        """(B,Tq,Ta) -> (B,) in [-1, 1]."""
        x = sa.unsqueeze(1)
        h = torch.cat([branch(x) for branch in self.branches], dim=1)
        return torch.tanh(self.fc2(self.fc1(self.dropout(h)))).squeeze(1)


class KernelPooling(nn.Module):
    """K-NRM: K_k(S_ij) = exp(-(S_ij - mu_k)^2 / (2 sigma_k^2)), soft-TF per question word = sum over the
    answer's words, features = sum over question words of log(soft-TF) (x 0.01 as in their code),
    score = tanh(w·features + b)."""

    def __init__(self, config: MmaicmConfig):
        super().__init__()
        k = config.knrm_kernels
        step = 2.0 / (k - 1)
        mus = [1.0] + [1.0 - step / 2 - i * step for i in range(k - 1)]  # 1, 0.9, 0.7, .., -0.9 for k = 11
        sigmas = [config.knrm_exact_sigma] + [config.knrm_sigma] * (k - 1)
        self.register_buffer("mu", torch.tensor(mus), persistent=False)
        self.register_buffer("sigma", torch.tensor(sigmas), persistent=False)
        self.dense = nn.Linear(k, 1)

    def forward(self, s: torch.Tensor, q_mask: torch.Tensor, a_mask: torch.Tensor) -> torch.Tensor:
        """(B,Tq,Ta) cosines -> (B,)."""
        k = torch.exp(-((s.unsqueeze(-1) - self.mu) ** 2) / (2 * self.sigma ** 2))  # (B,Tq,Ta,K)
        soft_tf = (k * a_mask[:, None, :, None]).sum(dim=2)  # (B,Tq,K)
        features = (torch.log(soft_tf.clamp(min=1e-10)) * 0.01 * q_mask.unsqueeze(-1)).sum(dim=1)  # (B,K)
        return torch.tanh(self.dense(features)).squeeze(1)


# ------------------------------------------------------------------------------------------------
# the model


class MMAICM(nn.Module):
    """Word matrices of question-answer pairs -> match scores (B,) in [-1, 1]."""

    def __init__(self, config: MmaicmConfig):
        super().__init__()
        self.config = config
        self.interaction = InteractionMatrix()
        cnn = config.matcher == "cnn"
        self.attention = InteractionAttention(config) if cnn and config.use_attention else None
        self.matcher: nn.Module = ConvMatcher(config) if cnn else KernelPooling(config)

    def forward(self, q: torch.Tensor, q_mask: torch.Tensor, a: torch.Tensor, a_mask: torch.Tensor, *,
                context_q: torch.Tensor | None = None, context_a: torch.Tensor | None = None) -> torch.Tensor:
        """q (B,Tq,d) + bool mask (B,Tq), a (B,Ta,d) + mask (B,Ta) -> scores (B,). Any Tq, Ta: cut or
        zero-padded to max_q_len, max_a_len. A question batch of 1 is broadcast over the answers (one
        query against many candidates: its words are normalised and projected once)."""
        cfg = self.config
        q, q_mask = fit_length(q, q_mask, cfg.max_q_len)
        a, a_mask = fit_length(a, a_mask, cfg.max_a_len)
        if q.size(0) != a.size(0) and q.size(0) != 1:
            raise ValueError(f"{q.size(0)} questions for {a.size(0)} answers: give one question or one per answer")
        s = self.interaction(q, q_mask, a, a_mask)  # (1), (B,Tq,Ta)
        if cfg.matcher == "knrm":
            return self.matcher(s, q_mask.expand(s.size(0), -1), a_mask)
        if self.attention is not None:
            s = s * self.attention(q, q_mask, a, a_mask, context_q, context_a)  # (8)
        return self.matcher(s)  # (9)

    def attention_matrix(self, q: torch.Tensor, q_mask: torch.Tensor, a: torch.Tensor, a_mask: torch.Tensor) -> torch.Tensor:
        """A (B, max_q_len, max_a_len), for inspection (the paper's Fig. 6)."""
        if self.attention is None:
            raise RuntimeError("this model has no attention (use_attention=False or matcher='knrm')")
        q, q_mask = fit_length(q, q_mask, self.config.max_q_len)
        a, a_mask = fit_length(a, a_mask, self.config.max_a_len)
        return self.attention(q, q_mask, a, a_mask)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def fit_length(x: torch.Tensor, mask: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,T,d), (B,T) -> (B,length,d), (B,length): cut, or zero-padded; states at padding set to 0."""
    if x.dim() != 3 or mask.shape != x.shape[:2] or mask.dtype != torch.bool:
        raise ValueError(f"expected states (B,T,d) and a bool mask (B,T), got {tuple(x.shape)} and "
                         f"{mask.dtype} {tuple(mask.shape)}")
    T = x.size(1)
    if T > length:
        x, mask = x[:, :length], mask[:, :length]
    elif T < length:
        x = F.pad(x, (0, 0, 0, length - T))
        mask = F.pad(mask, (0, length - T), value=False)
    return x * mask.unsqueeze(-1), mask


def hinge_loss(positive: torch.Tensor, negative: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """max(0, margin - score(q, a+) + score(q, a-)), averaged over the triples   (10) (the paper sums)."""
    return torch.clamp(margin - positive + negative, min=0.0).mean()


# ------------------------------------------------------------------------------------------------
# the scorer and its model folder


class MmaicmScorer:
    """An MMAICM (or K-NRM) model with its word representation: texts in, scores out.

    Word vectors are kept per (text, length) in an LRU cache of `cache_size` texts (None = unbounded,
    for training and evaluations), always rounded through fp16 so a text scores the same whether it
    came from the cache or not. A service re-scores the same FAQ answers and phrasings again and
    again, so after the first requests only the query's words are computed. One call at a time
    (`MiniLMText` is not thread-safe).
    """

    def __init__(self, model: MMAICM, words: GloveWords | MiniLMWords, calibration: Calibration | None = None,
                 name: str = "unsaved", cache_size: int | None = 4096, device: str | None = None):
        if words.kind != model.config.word_repr:
            raise ValueError(f"word_repr={model.config.word_repr!r} but the word representation is {words.kind!r}")
        from models.encoders.base import pick_device

        self.device = torch.device(pick_device(device))
        self.model = model.to(self.device)
        self.words = words
        self.calibration = calibration or Calibration()
        self.name = name
        self.cache_size = cache_size
        self._cache: LRU[tuple[str, int], torch.Tensor] = LRU(sys.maxsize if cache_size is None else cache_size)
        self._lock = threading.RLock()
        self._weights_sha: str | None = None

    @property
    def config(self) -> MmaicmConfig:
        return self.model.config

    @property
    def word_cache(self) -> LRU[tuple[str, int], torch.Tensor]:
        """Word vectors by (text, max_len), half precision; `share_cache` shares it between scorers."""
        return self._cache

    @property
    def id(self) -> str:
        sha = self._weights_sha or "unsaved"
        return f"mmaicm:{self.name}:{sha[:12]}"

    # ---- word vectors ----------------------------------------------------------------------------
    def states(self, texts: Sequence[str], max_len: int) -> list[torch.Tensor]:
        """Each text's word vectors (len <= max_len, d), float32 on the CPU, through the cache."""
        with self._lock:
            out: list[torch.Tensor | None] = [None] * len(texts)
            todo: dict[str, list[int]] = {}
            for i, text in enumerate(texts):
                cached = self._cache.get((text, max_len))
                if cached is not None:
                    out[i] = cached
                else:
                    todo.setdefault(text, []).append(i)
            if todo:
                distinct = list(todo)
                for text, s in zip(distinct, self.words.states(distinct, max_len)):
                    s = s.half()
                    for i in todo[text]:
                        out[i] = s
                    self._cache.put((text, max_len), s)
            return [s.float() for s in out]  # type: ignore[union-attr]

    def share_cache(self, other: "MmaicmScorer") -> None:
        """Use `other`'s word-vector cache (same word representation): word vectors do not depend on the
        network's weights, so several models evaluated on the same texts compute them once."""
        if other.words.kind != self.words.kind:
            raise ValueError(f"cannot share a {other.words.kind} cache with a {self.words.kind} model")
        self._cache = other._cache

    def fill_cache(self, texts: Sequence[str], max_len: int, batch_size: int = 128, progress: bool = False) -> int:
        """Compute the word vectors of the distinct texts not cached yet, in batches of similar length."""
        todo = sorted({t for t in texts if (t, max_len) not in self._cache}, key=len)
        bar = None
        if progress and todo:
            import sys

            from tqdm import tqdm

            bar = tqdm(total=len(todo), unit="text", desc=f"word vectors ({self.words.kind})", file=sys.stderr,
                       mininterval=1.0, leave=False)
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            self.states(chunk, max_len)
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return len(todo)

    def inputs(self, texts: Sequence[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Texts -> (B, max_len, d) word vectors (zero-padded) and their (B, max_len) bool mask."""
        out, mask = pad_states(self.states(texts, max_len), self.words.dim, length=max_len)
        return out.to(self.device), mask.to(self.device)

    # ---- scores --------------------------------------------------------------------------------------
    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Raw scores in [-1, 1] (higher = better match) of `query` against each text, one forward pass."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        if len(texts) == 0:
            return np.zeros(0, dtype=np.float32)
        with self._lock:
            q, q_mask = self.inputs([query], self.config.max_q_len)
            a, a_mask = self.inputs(list(texts), self.config.max_a_len)
            return self._forward(q, q_mask, a, a_mask)

    def score_pairs(self, pairs: Sequence[tuple[str, str]], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        """Raw scores of (question, answer) pairs, batched; order kept."""
        out = np.zeros(len(pairs), dtype=np.float32)
        bar = None
        if progress and len(pairs) > batch_size:
            import sys

            from tqdm import tqdm

            bar = tqdm(total=len(pairs), unit="pair", desc="mmaicm", file=sys.stderr, mininterval=1.0, leave=False)
        with self._lock:
            for start in range(0, len(pairs), batch_size):
                chunk = pairs[start:start + batch_size]
                q, q_mask = self.inputs([p[0] for p in chunk], self.config.max_q_len)
                a, a_mask = self.inputs([p[1] for p in chunk], self.config.max_a_len)
                out[start:start + len(chunk)] = self._forward(q, q_mask, a, a_mask)
                if bar is not None:
                    bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return out

    def _forward(self, q, q_mask, a, a_mask) -> np.ndarray:
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                return self.model(q, q_mask, a, a_mask).float().cpu().numpy()
        finally:
            self.model.train(was_training)

    def probability(self, raw: np.ndarray | Sequence[float]) -> np.ndarray:
        """Calibrated P(the text answers / matches the query) for raw scores."""
        return self.calibration.prob(raw).astype(np.float32)

    # ---- persistence ------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """config.json, model.safetensors, text.json (which word vectors: a reference to the package, never
        the vectors), calibration.json."""
        from safetensors.torch import save_file

        from models.encoders.base import file_sha256

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in self.model.state_dict().items()}
        weights = directory / WEIGHTS_FILE
        tmp = directory / (WEIGHTS_FILE + ".tmp")
        save_file(tensors, str(tmp), metadata={"format_version": str(FORMAT_VERSION)})
        os.replace(tmp, weights)
        config = {"format_version": FORMAT_VERSION, "architecture": ARCHITECTURE, **dataclasses.asdict(self.config)}
        write_json(directory / CONFIG_FILE, config)
        write_json(directory / WORDS_FILE, {"format_version": FORMAT_VERSION, **self.words.meta()})
        self.save_calibration(directory)
        self.name = directory.resolve().name
        self._weights_sha = file_sha256(weights)
        return directory

    def save_calibration(self, directory: str | Path) -> None:
        write_calibration(directory, self.calibration)


def read_config(path: str | Path) -> MmaicmConfig:
    """config.json -> MmaicmConfig, checking the format and naming unknown fields."""
    meta = read_model_config(path, FORMAT_VERSION, ARCHITECTURE)
    unknown = sorted(set(meta) - MmaicmConfig.field_names())
    if unknown:
        raise ValueError(f"{path}: unknown MmaicmConfig fields {unknown}")
    return MmaicmConfig(**meta)


def load_mmaicm(directory: str | Path, device: str | None = None, cache_size: int | None = 4096,
                words: GloveWords | MiniLMWords | None = None, runtime: str = "torch",
                cache_dir: str | Path | None = None) -> MmaicmScorer:
    """A model folder (`faq train mmaicm`) -> an `MmaicmScorer` in eval mode. `words` reuses an already
    loaded word representation of the same kind; `runtime` runs the MiniLM states ("onnx" is fp32 ONNX
    Runtime: the states the model was trained on, to 1e-4)."""
    from models.encoders.base import file_sha256

    directory = Path(directory)
    config = read_config(directory / CONFIG_FILE)
    meta_path = directory / WORDS_FILE
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() else {}
    if meta.get("kind", config.word_repr) != config.word_repr:
        raise ValueError(f"{meta_path}: kind {meta.get('kind')!r} but config.json says word_repr {config.word_repr!r}")
    if words is None:
        words = make_words(config.word_repr, device=device or "cpu", runtime=runtime, cache_dir=cache_dir)
    if meta.get("tokenizer_vocab_size") not in (None, getattr(getattr(words, "text", None), "vocab_size", None)):
        raise ValueError(f"{meta_path}: saved with a {meta['tokenizer_vocab_size']}-wordpiece tokenizer, the installed "
                         f"base differs")
    weights = directory / WEIGHTS_FILE
    model = MMAICM(config)
    load_weights(model, weights)
    model.eval()
    scorer = MmaicmScorer(model, words, read_calibration(directory), name=directory.resolve().name,
                          cache_size=cache_size, device=device)
    scorer._weights_sha = file_sha256(weights)
    return scorer

