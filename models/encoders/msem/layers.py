"""The transformer layers MSEM copies from its token base for `minilm_train_layers` (ours): with N > 0 the
frozen text side (models/encoders/words.py `MiniLMText`) stops N layers early and MSEM's own trainable
copies of the base's top N layers finish the job (`MiniLMTokenStates` in model.py). Each copy carries the
HF checkpoint's parameter names (`load_hf_state`), so at creation it computes exactly what the base
computes (tested against the transformer).

    MiniLMLayer               one all-MiniLM-L6-v2 (BERT, post-LN) encoder layer
    MPNetLayer                one all-mpnet-base-v2 encoder layer: a BERT layer plus a relative position bias
    relative_position_bucket  MPNet's (T5's) buckets of key - query offsets, for that bias
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

#: width of all-MiniLM-L6-v2's token states (the `word_repr="minilm"` input)
MINILM_DIM = 384
#: position embeddings of the MiniLM transformer: the longest wordpiece sequence it can read
MINILM_MAX_POSITIONS = 512
#: all-MiniLM-L6-v2's transformer (config.json of the package): layers, heads, FFN width, LayerNorm eps
MINILM_LAYERS, MINILM_HEADS, MINILM_FFN, MINILM_LN_EPS, MINILM_DROPOUT = 6, 12, 1536, 1e-12, 0.1
#: all-mpnet-base-v2's encoder layers (post-LN BERT layers plus a relative position bias shared by all)
MPNET_LAYERS, MPNET_HEADS, MPNET_FFN, MPNET_LN_EPS, MPNET_BUCKETS, MPNET_MAX_DISTANCE = 12, 12, 3072, 1e-5, 32, 128


class MiniLMLayer(nn.Module):
    """One BERT encoder layer as all-MiniLM-L6-v2 has it (post-LN), for `minilm_train_layers`:

        a = LayerNorm(x + Dropout(W_o MultiHead(x W_q, x W_k, x W_v)))      padding masked as keys
        y = LayerNorm(a + Dropout(W_2 gelu(a W_1)))

    Same parameter names as the HF checkpoint's `encoder.layer.{i}` (see `load_hf_state`), so a copy of
    MiniLM's layer computes exactly what MiniLM computes (tested against the transformer).
    """

    def __init__(self, dim: int = MINILM_DIM, heads: int = MINILM_HEADS, ffn_dim: int = MINILM_FFN,
                 eps: float = MINILM_LN_EPS):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.attn_out = nn.Linear(dim, dim)
        self.attn_norm = nn.LayerNorm(dim, eps=eps)
        self.ffn_in, self.ffn_out = nn.Linear(dim, ffn_dim), nn.Linear(ffn_dim, dim)
        self.ffn_norm = nn.LayerNorm(dim, eps=eps)
        self.dropout = nn.Dropout(MINILM_DROPOUT)

    #: HF name -> ours
    HF_NAMES = {
        "attention.self.query": "query", "attention.self.key": "key", "attention.self.value": "value",
        "attention.output.dense": "attn_out", "attention.output.LayerNorm": "attn_norm",
        "intermediate.dense": "ffn_in", "output.dense": "ffn_out", "output.LayerNorm": "ffn_norm",
    }

    def load_hf_state(self, state: dict[str, torch.Tensor]) -> None:
        """Copy one HF `BertLayer` state dict (keys like `attention.self.query.weight`)."""
        ours = {}
        for key, value in state.items():
            module, _, param = key.rpartition(".")
            ours[f"{self.HF_NAMES[module]}.{param}"] = value
        self.load_state_dict(ours)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, 384), (B, T) bool -> (B, T, 384)."""
        B, T, D = x.shape
        split = lambda t: t.view(B, T, self.heads, D // self.heads).transpose(1, 2)  # (B, h, T, dh)
        att = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)),
                                             attn_mask=mask[:, None, None, :])
        a = self.attn_norm(x + self.dropout(self.attn_out(att.transpose(1, 2).reshape(B, T, D))))
        return self.ffn_norm(a + self.dropout(self.ffn_out(F.gelu(self.ffn_in(a)))))


def relative_position_bucket(relative: torch.Tensor, buckets: int = MPNET_BUCKETS,
                             max_distance: int = MPNET_MAX_DISTANCE) -> torch.Tensor:
    """MPNet's (T5's bidirectional) buckets of key - query offsets: half the buckets per direction, exact
    up to buckets/4 apart, then logarithmic up to `max_distance`."""
    half = buckets // 2
    n = -relative
    ret = (n < 0).long() * half
    n = n.abs()
    exact = half // 2
    large = exact + (torch.log(n.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (half - exact)).long()
    return ret + torch.where(n < exact, n, large.clamp(max=half - 1))


class MPNetLayer(MiniLMLayer):
    """One all-mpnet-base-v2 encoder layer, for `minilm_train_layers` on word_repr "mpnet": a BERT layer
    (post-LN) whose attention scores also get the relative position bias B (heads, T, T):

        a = LayerNorm(x + Dropout(W_o softmax(Q Kᵀ / sqrt(dh) + B + mask) V))
        y = LayerNorm(a + Dropout(W_2 gelu(a W_1)))

    Same parameter names as the HF checkpoint's `encoder.layer.{i}` (see `load_hf_state`); tested against
    the transformer.
    """

    HF_NAMES = {
        "attention.attn.q": "query", "attention.attn.k": "key", "attention.attn.v": "value",
        "attention.attn.o": "attn_out", "attention.LayerNorm": "attn_norm",
        "intermediate.dense": "ffn_in", "output.dense": "ffn_out", "output.LayerNorm": "ffn_norm",
    }

    def __init__(self):
        super().__init__(dim=768, heads=MPNET_HEADS, ffn_dim=MPNET_FFN, eps=MPNET_LN_EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """(B, T, 768), (B, T) bool, (heads, T, T) -> (B, T, 768)."""
        B, T, D = x.shape
        split = lambda t: t.view(B, T, self.heads, D // self.heads).transpose(1, 2)  # (B, h, T, dh)
        scores = bias.unsqueeze(0).masked_fill(~mask[:, None, None, :], float("-inf"))  # (B, h, T, T)
        att = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)),
                                             attn_mask=scores, dropout_p=self.dropout.p if self.training else 0.0)
        a = self.attn_norm(x + self.dropout(self.attn_out(att.transpose(1, 2).reshape(B, T, D))))
        return self.ffn_norm(a + self.dropout(self.ffn_out(F.gelu(self.ffn_in(a)))))
