"""MSEM: the Multi-task Sentence Encoding Model (Baidu, IJCNN 2019), section III of the paper.

One sentence -> one vector, so FAQ questions can be encoded offline into an ANN index and a query
encoded online with the same network. Reading order = data flow:

    WordRepresentation   GloVe vector ++ char-CNN (max-pooled over characters)          (III-C)
      or MiniLMTokenStates a pretrained transformer's token states (ours): `word_repr="minilm"`
                         all-MiniLM-L6-v2's, frozen, or with `minilm_train_layers` N its lower 6-N
                         layers' through N MiniLMLayer copies (layers.py) of its top layers that train with MSEM;
                         `word_repr="mpnet"` all-mpnet-base-v2's, frozen
    nn.GRU (bidirectional)                                                              (6)-(9)
    AttentionRecurrentUnit
        PosMultiHeadAttention  C = PosMultiHead(x, x, x), softmax(QK^T/sqrt(d_k) + M_pos)V  (10), (13), (14)
        gates                  f = σ(xW1 + CW2), h~ = tanh(xWc1 + CWc2)                     (11), (12)
        dynamic_average_pooling h_t = (1 - f_t) ∘ h~_t + f_t ∘ h_{t-1}                     (15)
        highway to the input   r = σ(xWr1 + CWr2), o = (1 - r) ∘ x + r ∘ h                 (16), (17)
    FeedForward          LayerNorm(o + FFN(o)), FFN(o) = max(0, oW1 + b1)W2 + b2            (18)
    AttentivePooling     A = softmax(Ws2 tanh(Ws1 o^T)), M = A o, concat the r rows         (19), (20)
    dropout, Highway (2 layers)                                     -> sentence vector u
    intent_head          softmax(W u + b), shared by both sentences of a pair               (1), (2)
    match_prob           σ(γ (cos(u, v) - α))                                               (3)

Padding (mask False) never influences a real token's result: it is zeroed in the embeddings, excluded
from the char max-pool, packed away from the GRU, masked as attention keys, skipped by the scan,
and masked out of the pooling. Sentences are left-aligned (mask is a prefix of True).
Where the paper is silent the choice is ours; each such field says so in `MsemConfig`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from models.encoders.msem.layers import (  # noqa: F401  (MINILM_DIM: the states' width, read from here too)
    MINILM_DIM,
    MINILM_LAYERS,
    MINILM_MAX_POSITIONS,
    MPNET_BUCKETS,
    MPNET_HEADS,
    MPNET_LAYERS,
    MiniLMLayer,
    MPNetLayer,
    relative_position_bucket,
)
from models.encoders.words import TOKEN_BASES

#: layers of each token base (what `minilm_train_layers` can take from the top)
BASE_LAYERS = {"minilm": MINILM_LAYERS, "mpnet": MPNET_LAYERS}
WORD_REPRESENTATIONS = ("glove_char", *TOKEN_BASES)


@dataclass
class MsemConfig:
    word_vocab_size: int  # minilm: the wordpiece vocabulary size (informational, no embedding table here)
    char_vocab_size: int  # minilm: unused (2)
    # ---- word representation (III-C)
    # ours: "glove_char" = the paper's GloVe ++ char-CNN; "minilm" / "mpnet" = the frozen packaged
    # all-MiniLM-L6-v2's / all-mpnet-base-v2's last-layer wordpiece states (sentence markers kept),
    # computed outside the module (models/encoders/words.py MiniLMText)
    word_repr: str = "glove_char"
    word_dim: int = 50  # GloVe 6B-50d here (paper: GloVe 840B-300d); minilm: 384 = states as they are, else a Linear(384, word_dim)
    char_dim: int = 150  # paper
    char_filters: int = 100  # ours: width of the char-CNN output
    char_kernel: int = 3  # ours: odd, "same" padding so one-letter words still convolve
    max_word_len: int = 16  # ours: characters per word kept for the char-CNN
    n_learned_words: int = 2  # ids [0, n) = <pad>, <unk>, training words without GloVe: always trainable
    freeze_word: bool = True  # GloVe rows (ids >= n_learned_words) stay fixed
    # ---- encoder
    hidden: int = 300  # BiGRU hidden per direction (paper) -> d = 2*hidden
    heads: int = 6  # ours: PosMultiHead heads (must divide 2*hidden)
    max_len: int = 40  # ours: M_pos is max_len x max_len; longer input is truncated to max_len tokens
    ffn_dim: int = 1200  # ours: FFN inner width (2*d for the paper's d=600)
    pool_heads_r: int = 4  # ours: r, rows of the attentive pooling matrix
    pool_da: int = 350  # ours: d_a of attentive pooling (Lin et al. 2017 used 350)
    highway_layers: int = 2  # paper
    out_dim: int | None = None  # ours: project the pooled r*d vector to out_dim BEFORE the highway (None = paper)
    dropout: float = 0.1  # paper: on the attentive-pooling output
    embed_dropout: float = 0.0  # ours: on the word representation (0 = paper)
    # ---- training heads (III-A)
    n_intents: int = 0  # size of the shared intent softmax (0 = no intent head)
    gamma: float = 10.0  # matching layer σ(γ(cos - α)); paper: a hyper-parameter, value not given
    alpha: float = 0.5  # idem
    lambda_: float = 0.8  # paper: loss = λ L_match + (1 - λ)(L1 + L2)/2
    # ---- ablations (paper Table VI)
    use_multitask: bool = True  # False: no intent head, matching loss only
    use_aru: bool = True  # False: BiGRU output goes straight to the FFN
    aru_as_mha: bool = False  # True: ARU replaced by LayerNorm(x + MultiHead(x,x,x)) without M_pos
    pooling: str = "attentive"  # "attentive" (paper) | "max"
    use_highway: bool = True
    use_char: bool = True
    # ---- ours: similarity fused with the base transformer's own sentence embedding (token-state variants)
    #: weight w of the base's sentence embedding (masked mean of the token states MSEM reads; the field
    #: keeps its first name, it applies to mpnet as well):
    #: sentence vector = [sqrt(1-w)·û ; sqrt(w)·m̂], so cos = (1-w)·cos_MSEM + w·cos_base.
    #: 0 = MSEM alone (paper). Keeps the base's generality on FAQs far from the training data.
    minilm_fusion: float = 0.0
    #: ours: the top N layers of the token base (MiniLM's 6, mpnet's 12; the field keeps its first name)
    #: are part of MSEM (initialised from the base, trained with it, saved in its weights); the frozen
    #: text side stops below them. 0 = the base entirely frozen.
    minilm_train_layers: int = 0

    def __post_init__(self) -> None:
        positive = [
            "word_vocab_size", "char_vocab_size", "word_dim", "char_dim", "char_filters", "char_kernel",
            "max_word_len", "hidden", "heads", "max_len", "ffn_dim", "pool_heads_r", "pool_da",
        ]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MsemConfig.{name} must be a positive int, got {value!r}")
        if self.char_kernel % 2 == 0:
            raise ValueError(f"MsemConfig.char_kernel must be odd, got {self.char_kernel}")
        if (2 * self.hidden) % self.heads:
            raise ValueError(f"MsemConfig.heads={self.heads} must divide 2*hidden={2 * self.hidden}")
        if not 2 <= self.n_learned_words <= self.word_vocab_size:
            raise ValueError(
                f"MsemConfig.n_learned_words must be in [2, word_vocab_size={self.word_vocab_size}], "
                f"got {self.n_learned_words}"
            )
        if self.highway_layers < 0:
            raise ValueError(f"MsemConfig.highway_layers must be >= 0, got {self.highway_layers}")
        if self.out_dim is not None and self.out_dim < 1:
            raise ValueError(f"MsemConfig.out_dim must be None or >= 1, got {self.out_dim}")
        if self.n_intents < 0:
            raise ValueError(f"MsemConfig.n_intents must be >= 0, got {self.n_intents}")
        for name in ("dropout", "embed_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"MsemConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if not 0.0 <= self.lambda_ <= 1.0:
            raise ValueError(f"MsemConfig.lambda_ must be in [0, 1], got {self.lambda_}")
        if self.gamma <= 0:
            raise ValueError(f"MsemConfig.gamma must be > 0, got {self.gamma}")
        if self.pooling not in ("attentive", "max"):
            raise ValueError(f"MsemConfig.pooling must be 'attentive' or 'max', got {self.pooling!r}")
        if self.word_repr not in WORD_REPRESENTATIONS:
            raise ValueError(f"MsemConfig.word_repr must be one of {WORD_REPRESENTATIONS}, got {self.word_repr!r}")
        if not 0.0 <= self.minilm_fusion < 1.0:
            raise ValueError(f"MsemConfig.minilm_fusion must be in [0, 1), got {self.minilm_fusion}")
        if self.minilm_fusion > 0 and not self.uses_token_states:
            raise ValueError("MsemConfig.minilm_fusion needs word_repr 'minilm' or 'mpnet' (it fuses the base's own "
                             "sentence vector)")
        top = BASE_LAYERS.get(self.word_repr, 0)
        if not isinstance(self.minilm_train_layers, int) or isinstance(self.minilm_train_layers, bool) \
                or not 0 <= self.minilm_train_layers <= max(top, 0):
            raise ValueError(f"MsemConfig.minilm_train_layers must be an int in [0, {top}] for word_repr "
                             f"{self.word_repr!r}, got {self.minilm_train_layers!r}")
        if self.uses_token_states and self.max_len > MINILM_MAX_POSITIONS:
            raise ValueError(f"MsemConfig.max_len={self.max_len}: word_repr={self.word_repr!r} reads at most "
                             f"{MINILM_MAX_POSITIONS} wordpieces")

    @property
    def uses_token_states(self) -> bool:
        """A pretrained transformer's token states are the word representation (not GloVe ++ chars)."""
        return self.word_repr in TOKEN_BASES

    @property
    def token_dim(self) -> int:
        """Width of the base transformer's token states (token-state variants only)."""
        return TOKEN_BASES[self.word_repr][1]

    @property
    def d_model(self) -> int:
        """u in the paper: width of every per-token state after the BiGRU."""
        return 2 * self.hidden

    @property
    def pooled_dim(self) -> int:
        return self.pool_heads_r * self.d_model if self.pooling == "attentive" else self.d_model

    @property
    def u_dim(self) -> int:
        """MSEM's sentence vector u (highway and intent head width)."""
        return self.out_dim if self.out_dim is not None else self.pooled_dim

    @property
    def sentence_dim(self) -> int:
        """What the encoder outputs: u, or u ++ the base's sentence vector with `minilm_fusion`."""
        return self.u_dim + (self.token_dim if self.minilm_fusion > 0 else 0)

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


# ------------------------------------------------------------------------------------------------
# word representation (III-C)


class CharCNN(nn.Module):
    """Characters of each word -> embedding -> Conv1d -> max over the word's real characters -> ReLU."""

    def __init__(self, config: MsemConfig):
        super().__init__()
        self.embed = nn.Embedding(config.char_vocab_size, config.char_dim, padding_idx=0)
        self.conv = nn.Conv1d(config.char_dim, config.char_filters, config.char_kernel, padding=config.char_kernel // 2)

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, C) char ids, (B, T) word mask -> (B, T, char_filters); zeros at padding words."""
        B, T, C = char_ids.shape
        out = char_ids.new_zeros((B * T, self.conv.out_channels), dtype=self.conv.weight.dtype)
        # convolve only the real words: padding words are most of a long batch's B*T rows
        rows = mask.reshape(-1).nonzero().squeeze(1)
        chars = char_ids.reshape(B * T, C).index_select(0, rows)
        char_mask = chars != 0
        # zeroed pad characters look exactly like the conv's own zero padding, so a word's features do
        # not depend on how many pad characters the batch adds after it
        x = self.embed(chars) * char_mask.unsqueeze(-1)
        x = self.conv(x.transpose(1, 2))  # (words, filters, C)
        x = x.masked_fill(~char_mask.unsqueeze(1), float("-inf")).amax(dim=2)
        x = torch.relu(x)  # -inf (a word without characters) -> 0
        out = out.index_copy(0, rows, x.to(out.dtype))
        return out.reshape(B, T, -1)


class WordRepresentation(nn.Module):
    """GloVe word vector ++ char-CNN feature. GloVe rows are a separate, frozen parameter (when
    `freeze_word`), so optimiser weight decay cannot move them either."""

    def __init__(self, config: MsemConfig, word_vectors: torch.Tensor | None = None):
        super().__init__()
        n_learned = config.n_learned_words
        n_pretrained = config.word_vocab_size - n_learned
        if word_vectors is None:
            word_vectors = torch.randn(config.word_vocab_size, config.word_dim) * 0.1
        if tuple(word_vectors.shape) != (config.word_vocab_size, config.word_dim):
            raise ValueError(
                f"word_vectors must be (word_vocab_size={config.word_vocab_size}, word_dim={config.word_dim}), "
                f"got {tuple(word_vectors.shape)}"
            )
        word_vectors = word_vectors.detach().float().clone()
        word_vectors[0] = 0.0  # <pad>
        self.n_learned = n_learned
        self.word_learned = nn.Parameter(word_vectors[:n_learned].contiguous())
        self.word_pretrained = nn.Parameter(
            word_vectors[n_learned:].contiguous(), requires_grad=not config.freeze_word
        )
        self.chars = CharCNN(config) if config.use_char else None
        self.dropout = nn.Dropout(config.embed_dropout)
        self.out_dim = config.word_dim + (config.char_filters if config.use_char else 0)
        self._has_pretrained = n_pretrained > 0

    def forward(self, word_ids: torch.Tensor, char_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        learned = F.embedding(word_ids.clamp(max=self.n_learned - 1), self.word_learned)
        if self._has_pretrained:
            pretrained = F.embedding((word_ids - self.n_learned).clamp(min=0), self.word_pretrained)
            words = torch.where((word_ids < self.n_learned).unsqueeze(-1), learned, pretrained)
        else:
            words = learned
        parts = [words]
        if self.chars is not None:
            parts.append(self.chars(char_ids, mask))
        x = torch.cat(parts, dim=-1) * mask.unsqueeze(-1)
        return self.dropout(x)


class MiniLMTokenStates(nn.Module):
    """Word representation of the token-state variants (ours): the base transformer's last-layer
    wordpiece states (all-MiniLM-L6-v2, 384 wide, or all-mpnet-base-v2, 768), optionally through a
    Linear(token_dim, word_dim).

    The frozen part of the transformer runs outside this module (`models.encoders.words.MiniLMText`): it has
    nothing to learn and nothing to save (a model folder references the package by name), and training
    computes its states once per distinct sentence and caches them. With `minilm_train_layers` N the
    text side stops after layer 6-N and `top` (N MiniLMLayer, initialised from MiniLM's top layers by
    `models.encoders.msem.encoder`) finishes the job here, trainable. States arrive (B, T, 384) with a
    left-aligned mask; [CLS] and [SEP] are kept as tokens (attentive pooling may use them as summaries).
    """

    def __init__(self, config: MsemConfig):
        super().__init__()
        mpnet = config.word_repr == "mpnet"
        self.top = nn.ModuleList((MPNetLayer() if mpnet else MiniLMLayer()) for _ in range(config.minilm_train_layers))
        # mpnet's relative position bias, shared by its layers: a trainable copy for the top ones
        self.rel_bias = nn.Embedding(MPNET_BUCKETS, MPNET_HEADS) if mpnet and config.minilm_train_layers else None
        dim = config.token_dim
        self.project = nn.Linear(dim, config.word_dim) if config.word_dim != dim else None
        self.dropout = nn.Dropout(config.embed_dropout)
        self.out_dim = config.word_dim

    def finish(self, token_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The text side's states -> the base's last-layer states (identity when no layer trains)."""
        if self.rel_bias is None:
            for layer in self.top:
                token_states = layer(token_states, mask)
            return token_states
        T = token_states.shape[1]
        pos = torch.arange(T, device=token_states.device)
        bias = self.rel_bias(relative_position_bucket(pos[None, :] - pos[:, None])).permute(2, 0, 1)  # (heads, T, T)
        for layer in self.top:
            token_states = layer(token_states, mask, bias)
        return token_states

    def forward(self, token_states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, 384) last-layer states (after `finish`), (B, T) mask -> (B, T, word_dim); zeros at padding."""
        keep = mask.unsqueeze(-1).to(token_states.dtype)
        x = token_states * keep
        if self.project is not None:
            x = self.project(x) * keep  # the bias would otherwise make padding non-zero
        return self.dropout(x)


# ------------------------------------------------------------------------------------------------
# Attention Recurrent Unit (III-E)


class PosMultiHeadAttention(nn.Module):
    """PosMultiHead(Q,K,V) = concat_i softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k) + M_pos) V W_i^V   (13), (14).

    M_pos (max_len x max_len, zero-initialised, learned) is one matrix shared by the heads, as written in
    the paper; it is sliced to the batch's length T. No output projection: (14) is a plain concat.
    """

    def __init__(self, d_model: int, heads: int, max_len: int, position_bias: bool = True):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)  # W^Q, W^K, W^V of all heads at once
        self.m_pos = nn.Parameter(torch.zeros(max_len, max_len)) if position_bias else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, self.d_k).permute(2, 0, 3, 1, 4)  # each (B, h, T, d_k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)  # (B, h, T, T)
        if self.m_pos is not None:
            scores = scores + self.m_pos[:T, :T]
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))  # padding is never a key
        out = torch.softmax(scores, dim=-1) @ v  # (B, h, T, d_k)
        return out.transpose(1, 2).reshape(B, T, d)


def dynamic_average_pooling(f: torch.Tensor, h_tilde: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """h_t = (1 - f_t) ∘ h~_t + f_t ∘ h_{t-1}, h_0 = 0, over dim 1 of (B, T, d) tensors   (15).

    At padding h_t = h_{t-1}. Computed as a Hillis-Steele parallel scan in ceil(log2 T) vectorised steps
    instead of a T-step Python loop: each position holds the affine map h_{s-1} -> h_t of a segment,
    (keep = prod f, add = result from a zero start), and step k composes it with the segment 2^k
    positions earlier. Only products of gates in [0, 1] and sums appear, so it is as stable as the loop
    (no division by cumulative products, unlike the log-space closed form).
    """
    valid = mask.unsqueeze(-1)
    keep = torch.where(valid, f, torch.ones_like(f))
    add = torch.where(valid, (1.0 - f) * h_tilde, torch.zeros_like(h_tilde))
    T, offset = f.size(1), 1
    while offset < T:
        add = torch.cat([add[:, :offset], add[:, offset:] + keep[:, offset:] * add[:, :-offset]], dim=1)
        keep = torch.cat([keep[:, :offset], keep[:, offset:] * keep[:, :-offset]], dim=1)
        offset *= 2
    return add


class AttentionRecurrentUnit(nn.Module):
    """ARU: self-attention context C drives an SRU-like forget gate, the DA-pooling scan, and a highway
    back to the input x   (10)-(17). Everything but the scan is parallel over positions."""

    def __init__(self, config: MsemConfig):
        super().__init__()
        d = config.d_model
        self.attention = PosMultiHeadAttention(d, config.heads, config.max_len, position_bias=True)
        self.x_gates = nn.Linear(d, 3 * d)  # x W_1, x W_c1, x W_r1 (+ biases)
        self.c_gates = nn.Linear(d, 3 * d, bias=False)  # C W_2, C W_c2, C W_r2

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        c = self.attention(x, mask)  # (10)
        fx, hx, rx = self.x_gates(x).chunk(3, dim=-1)
        fc, hc, rc = self.c_gates(c).chunk(3, dim=-1)
        f = torch.sigmoid(fx + fc)  # (11)
        h_tilde = torch.tanh(hx + hc)  # (12)
        h = dynamic_average_pooling(f, h_tilde, mask)  # (15)
        r = torch.sigmoid(rx + rc)  # (16)
        return (1.0 - r) * x + r * h  # (17)


class MultiHeadSelfAttentionBlock(nn.Module):
    """Ablation "ARU replaced by multi-head attention": LayerNorm(x + MultiHead(x, x, x)), no M_pos."""

    def __init__(self, config: MsemConfig):
        super().__init__()
        self.attention = PosMultiHeadAttention(config.d_model, config.heads, config.max_len, position_bias=False)
        self.norm = nn.LayerNorm(config.d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.attention(x, mask))


# ------------------------------------------------------------------------------------------------
# FFN, pooling, highway (III-F, III-G)


class FeedForward(nn.Module):
    """Add & Norm around the Transformer FFN: LayerNorm(o + max(0, o W1 + b1) W2 + b2)   (18)."""

    def __init__(self, config: MsemConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, config.d_model)
        self.norm = nn.LayerNorm(config.d_model)

    def forward(self, o: torch.Tensor) -> torch.Tensor:
        return self.norm(o + self.fc2(torch.relu(self.fc1(o))))


class AttentivePooling(nn.Module):
    """Structured self-attention (Lin et al. 2017): A = softmax(Ws2 tanh(Ws1 o^T)) over positions,
    M = A o (r x u), rows concatenated   (19), (20). `last_attention` keeps A (B, r, T) for an optional
    ||A A^T - I|| penalty in training."""

    def __init__(self, config: MsemConfig):
        super().__init__()
        self.w_s1 = nn.Linear(config.d_model, config.pool_da, bias=False)
        self.w_s2 = nn.Linear(config.pool_da, config.pool_heads_r, bias=False)
        self.last_attention: torch.Tensor | None = None

    def forward(self, o: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = self.w_s2(torch.tanh(self.w_s1(o)))  # (B, T, r)
        scores = scores.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        attention = torch.softmax(scores, dim=1).transpose(1, 2)  # (B, r, T), rows sum to 1 over real tokens
        if self.training:  # kept only for a training-time penalty; serving threads never write it
            self.last_attention = attention
        return (attention @ o).flatten(1)  # (B, r*u)


def masked_max_pool(o: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Ablation "attentive pooling replaced by max pooling": max over real positions, (B, T, u) -> (B, u)."""
    return o.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)


class Highway(nn.Module):
    """y = t ∘ relu(W_h x + b_h) + (1 - t) ∘ x, t = σ(W_t x + b_t), stacked (Srivastava et al. 2015).
    Transform-gate bias starts at -1 so each layer starts close to the identity (their recommendation)."""

    def __init__(self, dim: int, layers: int):
        super().__init__()
        self.transforms = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.gates = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        for gate in self.gates:
            nn.init.constant_(gate.bias, -1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for transform, gate in zip(self.transforms, self.gates):
            t = torch.sigmoid(gate(x))
            x = t * torch.relu(transform(x)) + (1.0 - t) * x
        return x


# ------------------------------------------------------------------------------------------------
# the model


def _checked_mask(mask: torch.Tensor) -> torch.Tensor:
    """Check that the mask is left-aligned; an empty sentence is read as one padding token, so every
    row has a key to attend to."""
    T = mask.size(1)
    lengths = mask.sum(dim=1)
    if not torch.equal(mask, torch.arange(T, device=mask.device) < lengths.unsqueeze(1)):
        raise ValueError("mask must be left-aligned: each row True for its tokens, then False")
    empty = lengths == 0
    if empty.any():
        mask = mask.clone()
        mask[empty, 0] = True
    return mask


class MSEM(nn.Module):
    """Sentence encoder + the two training heads (shared intent softmax, cosine matching layer)."""

    def __init__(self, config: MsemConfig, word_vectors: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        if config.uses_token_states:
            if word_vectors is not None:
                raise ValueError(f"word_vectors are for word_repr='glove_char'; {config.word_repr!r} has no word table")
            self.embed: nn.Module = MiniLMTokenStates(config)
        else:
            self.embed = WordRepresentation(config, word_vectors)
        self.bigru = nn.GRU(self.embed.out_dim, config.hidden, batch_first=True, bidirectional=True)
        if not config.use_aru:
            self.context: nn.Module | None = None
        elif config.aru_as_mha:
            self.context = MultiHeadSelfAttentionBlock(config)
        else:
            self.context = AttentionRecurrentUnit(config)
        self.ffn = FeedForward(config)
        self.pool = AttentivePooling(config) if config.pooling == "attentive" else None
        self.pool_dropout = nn.Dropout(config.dropout)
        self.project = nn.Linear(config.pooled_dim, config.out_dim) if config.out_dim is not None else None
        self.highway = Highway(config.u_dim, config.highway_layers) if config.use_highway else None
        self.intent_head: nn.Linear | None = (
            nn.Linear(config.u_dim, config.n_intents) if config.use_multitask and config.n_intents > 0 else None
        )

    def forward(
        self,
        word_ids: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        token_states: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """MSEM sentence vectors u (B, u_dim) from what the configured word representation reads:

        - `word_repr="glove_char"`: (B,T) word ids, (B,T,C) char ids, (B,T) bool mask (left-aligned);
        - `word_repr="minilm"|"mpnet"`: `token_states=` (B,T,token_dim) states from the text side and `mask=` (B,T).

        Both are what the matching text encoder's `batch_inputs` returns, so `model(**inputs)` works for
        either.
        """
        return self._encode(word_ids, char_ids, mask, token_states)[0]

    def encode_inputs(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, sentence vectors) for `batch_inputs` output: what training and encoding both need, with
        MiniLM's trainable top layers (if any) run once for both."""
        u, final = self._encode(inputs.get("word_ids"), inputs.get("char_ids"), inputs.get("mask"),
                                inputs.get("token_states"))
        return u, self._fuse(u, final)

    def _encode(self, word_ids, char_ids, mask, token_states):
        """-> (u, (MiniLM last-layer states, mask) or None)."""
        final = None
        if self.config.uses_token_states:
            if word_ids is not None or char_ids is not None:
                raise ValueError(f"word_repr={self.config.word_repr!r} reads token_states= and mask=, not word_ids/char_ids")
            token_states, mask = self._check_states(token_states, mask)
            states = self.embed.finish(token_states, mask)
            final = (states, mask)
            x = self.embed(states, mask)
        else:
            if token_states is not None:
                raise ValueError("token_states= is for the token-state variants; this model reads word_ids, char_ids, mask")
            if word_ids is None or char_ids is None or mask is None:
                raise ValueError("word_repr='glove_char' needs word_ids, char_ids and mask")
            word_ids, char_ids, mask = self._check_inputs(word_ids, char_ids, mask)
            x = self.embed(word_ids, char_ids, mask)
        lengths = mask.sum(dim=1)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        x, _ = pad_packed_sequence(self.bigru(packed)[0], batch_first=True, total_length=x.size(1))  # (6)-(9)
        if self.context is not None:
            x = self.context(x, mask)  # ARU (10)-(17)
        o = self.ffn(x)  # (18)
        pooled = self.pool(o, mask) if self.pool is not None else masked_max_pool(o, mask)  # (19), (20)
        u = self.pool_dropout(pooled)
        if self.project is not None:
            u = self.project(u)
        if self.highway is not None:
            u = self.highway(u)
        return u, final

    def sentence_vectors(self, u: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """u (B, u_dim) -> the L2-normalised vectors the index stores and the matching layer compares,
        (B, sentence_dim): û, or with `minilm_fusion` w, [sqrt(1-w)·û ; sqrt(w)·m̂] where m is MiniLM's own
        sentence embedding (sentence-transformers' mean pooling over its last-layer states and the mask).
        With `minilm_train_layers` this re-runs the top layers: `encode_inputs` does both in one pass."""
        final = None
        if self.config.minilm_fusion > 0:
            states, mask = self._check_states(inputs.get("token_states"), inputs.get("mask"))
            final = (self.embed.finish(states, mask), mask)
        return self._fuse(u, final)

    def _fuse(self, u: torch.Tensor, final: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        u_hat = F.normalize(u.float(), dim=-1, eps=1e-12)
        w = self.config.minilm_fusion
        if w <= 0:
            return u_hat
        assert final is not None
        states, mask = final[0].float(), final[1]
        keep = mask.unsqueeze(-1).to(states.dtype)
        m = (states * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1.0)  # (B, token_dim)
        m_hat = F.normalize(m, dim=-1, eps=1e-12)
        return torch.cat([math.sqrt(1.0 - w) * u_hat, math.sqrt(w) * m_hat], dim=-1)

    def intent_logits(self, u: torch.Tensor) -> torch.Tensor:
        """W u + b of (1), (2); the softmax/cross-entropy is the trainer's."""
        if self.intent_head is None:
            raise RuntimeError("this MSEM has no intent head (n_intents == 0 or use_multitask is False)")
        return self.intent_head(u)

    def match_prob(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """ŷ = σ(γ (cos(u, v) - α)) per row   (3)."""
        cos = F.cosine_similarity(u, v, dim=-1, eps=1e-8)
        return torch.sigmoid(self.config.gamma * (cos - self.config.alpha))

    def _check_inputs(
        self, word_ids: torch.Tensor, char_ids: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if word_ids.dim() != 2:
            raise ValueError(f"word_ids must be (B, T), got shape {tuple(word_ids.shape)}")
        B, T = word_ids.shape
        if mask.shape != (B, T) or mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool (B, T)=({B}, {T}) tensor, got {mask.dtype} {tuple(mask.shape)}")
        if char_ids.dim() != 3 or char_ids.shape[:2] != (B, T):
            raise ValueError(f"char_ids must be (B, T, C) with (B, T)=({B}, {T}), got {tuple(char_ids.shape)}")
        if B == 0:
            raise ValueError("empty batch")
        cfg = self.config
        if word_ids.numel() and (int(word_ids.min()) < 0 or int(word_ids.max()) >= cfg.word_vocab_size):
            raise ValueError(f"word_ids must be in [0, word_vocab_size={cfg.word_vocab_size})")
        if char_ids.numel() and (int(char_ids.min()) < 0 or int(char_ids.max()) >= cfg.char_vocab_size):
            raise ValueError(f"char_ids must be in [0, char_vocab_size={cfg.char_vocab_size})")
        # M_pos has max_len positions: keep the first max_len tokens, as the text encoder does
        L = cfg.max_len
        if T > L:
            word_ids, char_ids, mask = word_ids[:, :L], char_ids[:, :L], mask[:, :L]
        return word_ids, char_ids, _checked_mask(mask)

    def _check_states(
        self, token_states: torch.Tensor | None, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dim = self.config.token_dim
        if token_states is None or mask is None:
            raise ValueError(f"word_repr={self.config.word_repr!r} needs token_states= (B, T, {dim}) and mask= (B, T)")
        if token_states.dim() != 3 or token_states.size(-1) != dim or not token_states.is_floating_point():
            raise ValueError(f"token_states must be float (B, T, {dim}), got {token_states.dtype} "
                             f"{tuple(token_states.shape)}")
        B, T, _ = token_states.shape
        if mask.shape != (B, T) or mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool (B, T)=({B}, {T}) tensor, got {mask.dtype} {tuple(mask.shape)}")
        if B == 0:
            raise ValueError("empty batch")
        L = self.config.max_len
        if T > L:  # the text side truncates to max_len wordpieces already; this guards direct callers
            token_states, mask = token_states[:, :L], mask[:, :L]
        return token_states, _checked_mask(mask)

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)
