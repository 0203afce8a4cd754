"""`MsemEncoder`: an MSEM model + its `TextEncoder` behind the `models.encoders.base.Encoder` interface,
and the on-disk model folder format.

A model folder holds:
    config.json        MsemConfig fields + "format_version", "architecture", "weights_dtype"
    model.safetensors  the state dict (fp32, or fp16 for shipping; loaded back as fp32)
    words.txt          word vocabulary, id = line number (<pad>=0, <unk>=1)       [glove_char only]
    chars.txt          character vocabulary, id = line number (<pad>=0, <unk>=1)  [glove_char only]
    text.json          "kind": "glove_char" (TextEncoder settings: n_learned_words, max_word_len) or
                       "minilm" (a reference to the packaged all-MiniLM-L6-v2 by name: its weights
                       are not copied, the folder holds only the MSEM layers)
    README.md          optional model card (how it was trained)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

from models.encoders.base import file_sha256, pick_device
from models.folder import read_model_config
from models.glove import GloVe, load_glove
from models.encoders.msem.model import MSEM, TOKEN_BASES, MsemConfig
from models.encoders.words import MiniLMText, load_text
from models.text import TextEncoder

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
#: config fields `create` derives from the vocabulary; overriding them would break the embedding tables
DERIVED_FIELDS = ("word_vocab_size", "char_vocab_size", "n_learned_words")


class MsemEncoder:
    """Texts -> L2-normalised MSEM sentence vectors (float32), plus save/load/create of model folders."""

    def __init__(
        self, model: MSEM, text: TextEncoder | MiniLMText, device: str | None = None, name: str = "unsaved"
    ):
        cfg = model.config
        if cfg.uses_token_states != isinstance(text, MiniLMText):
            raise ValueError(
                f"word_repr={cfg.word_repr!r} needs a {'MiniLMText' if cfg.uses_token_states else 'TextEncoder'}, "
                f"got {type(text).__name__}"
            )
        if isinstance(text, MiniLMText):
            if text.kind != cfg.word_repr:
                raise ValueError(f"word_repr={cfg.word_repr!r} but the text side runs {text.model_name}")
            self._init(model, text, device, name)
            return
        if len(text.word_vocab) != cfg.word_vocab_size or len(text.char_vocab) != cfg.char_vocab_size:
            raise ValueError(
                f"vocabulary sizes (words {len(text.word_vocab)}, chars {len(text.char_vocab)}) do not match "
                f"the config (word_vocab_size {cfg.word_vocab_size}, char_vocab_size {cfg.char_vocab_size})"
            )
        if text.n_learned_words != cfg.n_learned_words or text.max_word_len != cfg.max_word_len:
            raise ValueError(
                f"text encoder (n_learned_words {text.n_learned_words}, max_word_len {text.max_word_len}) does not "
                f"match the config ({cfg.n_learned_words}, {cfg.max_word_len})"
            )
        self._init(model, text, device, name)

    def _init(self, model: MSEM, text: TextEncoder | MiniLMText, device: str | None, name: str) -> None:
        self.device = pick_device(device)
        self.model = model.to(self.device)
        self.text = text
        if isinstance(text, MiniLMText):
            # MiniLM's top `minilm_train_layers` layers belong to the model: the text side stops below them
            text.stop_after(text.total_layers - model.config.minilm_train_layers)
            text.to(self.device)
        self.name = name
        self.runtime = "torch"  # "onnx" / "onnx-int8" when `load` put the base on ONNX Runtime
        self._weights_sha: str | None = None  # set by save/load; None = hash the live weights on demand

    # ---- Encoder interface ----------------------------------------------------------------------
    @property
    def id(self) -> str:
        """"msem:<folder name>:<sha256 of model.safetensors, 12 hex>" once saved or loaded. An unsaved
        (e.g. training) model hashes its current tensors, so the id follows the weights."""
        sha = self._weights_sha or _state_dict_sha256(self.model.state_dict())
        return f"msem:{self.name}:{sha[:12]}"

    @property
    def dim(self) -> int:
        return self.model.config.sentence_dim

    def follow_live_weights(self) -> None:
        """Let `id` hash the live weights again rather than the saved file's: training goes on changing them."""
        self._weights_sha = None

    @property
    def calibration(self) -> tuple[float, float]:
        """(gamma, alpha) of the matching layer: p(match) = sigmoid(gamma * (cos - alpha))."""
        return (float(self.model.config.gamma), float(self.model.config.alpha))

    @property
    def config(self) -> MsemConfig:
        return self.model.config

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        """(n,) texts -> (n, dim) float32, rows L2-normalised, in input order.

        Runs in eval mode under `torch.inference_mode` (the model's train/eval mode is restored after,
        so a trainer can mine neighbours mid-training). Texts are sorted by token (wordpiece) count so
        each batch pads little; a sentence's vector does not depend on its batch-mates. For the minilm
        variant each batch runs the frozen MiniLM transformer, then MSEM (or reads the training cache).
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        max_len = self.model.config.max_len
        items = self.text.prepare(texts, max_len)  # token lists, or MiniLM wordpiece ids
        order = sorted(range(n), key=lambda i: -len(items[i]))
        starts = range(0, n, batch_size)
        if show_progress_bar:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="msem encode", unit="batch")
        # Only a model in training mode is switched (and switched back): a loaded model is already in
        # eval mode, so concurrent encode calls from serving threads never touch shared module state.
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            with torch.inference_mode():
                for start in starts:
                    idx = order[start : start + batch_size]
                    # minilm: the frozen transformer runs here, on the same length-sorted batch
                    inputs = self.text.batch_inputs([texts[i] for i in idx], [items[i] for i in idx], self.device)
                    out[idx] = self.model.encode_inputs(inputs)[1].cpu().numpy()
        finally:
            if was_training:
                self.model.train()
        return out

    # ---- persistence ----------------------------------------------------------------------------
    def save(
        self, directory: str | Path, fp16: bool = False, readme: str | None = None, keep_intent_head: bool = True
    ) -> Path:
        """Write the model folder (see module docstring). `fp16` halves the size for shipping;
        `keep_intent_head=False` drops the training-only intent classifier (sets n_intents to 0)."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config = self.model.config
        state = self.model.state_dict()
        if not keep_intent_head:
            state = {k: v for k, v in state.items() if not k.startswith("intent_head.")}
            config = dataclasses.replace(config, n_intents=0)
        dtype = torch.float16 if fp16 else torch.float32
        tensors = {
            k: (v.detach().to("cpu", dtype) if v.is_floating_point() else v.detach().cpu()).contiguous()
            for k, v in state.items()
        }
        weights_path = directory / WEIGHTS_FILE
        save_file(tensors, str(weights_path), metadata={"format_version": str(FORMAT_VERSION)})
        meta = {
            "format_version": FORMAT_VERSION,
            "architecture": "msem",
            "weights_dtype": "float16" if fp16 else "float32",
            **dataclasses.asdict(config),
        }
        (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        self.text.save(directory)
        if readme is not None:
            (directory / "README.md").write_text(readme, encoding="utf-8")
        self.name = directory.resolve().name
        self._weights_sha = file_sha256(weights_path)
        return directory

    @classmethod
    def load(cls, directory: str | Path, device: str | None = None, runtime: str = "torch",
             threads: int | None = None, cache_dir: str | Path | None = None) -> "MsemEncoder":
        """Load a model folder in eval mode; fp16 weights come back as fp32 (on CPU, then moved to `device`).

        `runtime` "onnx" / "onnx-int8" (models/encoders/runtime.py) runs the frozen base of a token-state model
        (MiniLM, mpnet) on ONNX Runtime; the MSEM layers stay in PyTorch (the GRU and the gated scan are
        a small share of the cost, docs/results.md). A GloVe model, or one that trains the base's top
        layers, has no exported part and runs "torch" whatever is asked: `encoder.runtime` says which.
        `cache_dir`: the model cache (mpnet, the exports; None: models/encoders/mpnet.py's default)."""
        from safetensors.torch import load_file

        directory = Path(directory)
        config = read_config(directory / CONFIG_FILE)
        text = load_text(directory, cache_dir=cache_dir)
        weights_path = directory / WEIGHTS_FILE
        if not weights_path.exists():
            raise FileNotFoundError(f"{weights_path}: missing model weights")
        state = {
            k: (v.float() if v.is_floating_point() else v) for k, v in load_file(str(weights_path), device="cpu").items()
        }
        model = MSEM(config)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"{weights_path}: weights do not fit the config: missing {missing}, unexpected {unexpected}")
        model.eval()  # a loaded model serves; a trainer calls .train() itself
        encoder = cls(model, text, device=device, name=directory.resolve().name)
        encoder._weights_sha = file_sha256(weights_path)
        if runtime != "torch" and isinstance(text, MiniLMText) and config.minilm_train_layers == 0:
            from models.encoders.mpnet import default_cache_dir
            from models.encoders.runtime import OnnxSentenceEncoder

            text.use_runtime(OnnxSentenceEncoder(text.model_path, text.model_name, config.token_dim, runtime,
                                                 cache_dir or default_cache_dir(), threads))
            encoder.runtime = runtime
        return encoder

    @classmethod
    def create(
        cls,
        config_overrides: Mapping[str, Any] | None,
        texts: Iterable[str],
        device: str | None = None,
        *,
        glove: GloVe | None = None,
        max_words: int = 50_000,
        min_count: int = 2,
        glove_top_n: int = 20_000,
        seed: int | None = None,
        minilm: MiniLMText | None = None,
        cache_dir: str | Path | None = None,
    ) -> "MsemEncoder":
        """A fresh MSEM for a training corpus: vocabulary from `texts` (see `TextEncoder.build`), GloVe
        rows for the words GloVe knows, random vectors (GloVe's scale) for <unk> and the other words.

        `{"word_repr": "minilm"}` builds the MiniLM-states variant instead (no vocabulary, no GloVe;
        `texts` is not read; `minilm` passes an already loaded `MiniLMText`; `cache_dir` is the model cache
        mpnet is found in, None: models/encoders/mpnet.py's default).
        The model is in training mode. `glove` defaults to the packaged GloVe 6B-50d; `glove_top_n` adds GloVe's most frequent words
        (within `max_words`) so queries with words unseen in training still get pretrained vectors.
        """
        overrides = dict(config_overrides or {})
        bad = [k for k in overrides if k in DERIVED_FIELDS]
        if bad:
            raise ValueError(f"config_overrides may not set {bad}: they follow from the vocabulary")
        unknown = sorted(set(overrides) - MsemConfig.field_names())
        if unknown:
            raise ValueError(f"config_overrides: unknown MsemConfig fields {unknown}")
        if seed is not None:
            torch.manual_seed(seed)
        if overrides.get("word_repr", "glove_char") in TOKEN_BASES:
            return cls._create_minilm(overrides, device, minilm, cache_dir)
        glove = glove if glove is not None else load_glove()
        word_dim = overrides.get("word_dim", glove.dim)
        if word_dim != glove.dim:
            raise ValueError(f"config_overrides word_dim={word_dim} but the GloVe vectors are {glove.dim}-d")
        text = TextEncoder.build(
            texts,
            glove.words,
            max_words,
            min_count=min_count,
            glove_top_n=glove_top_n,
            max_word_len=int(overrides.get("max_word_len", 16)),
        )
        config = MsemConfig(
            word_vocab_size=len(text.word_vocab),
            char_vocab_size=len(text.char_vocab),
            n_learned_words=text.n_learned_words,
            **{**overrides, "word_dim": glove.dim, "max_word_len": text.max_word_len},
        )
        _, std = glove.stats()
        vectors = torch.randn(config.word_vocab_size, config.word_dim) * std
        pretrained, found = glove.lookup(text.word_vocab[text.n_learned_words :])
        assert found.all(), "TextEncoder.build put a non-GloVe word among the GloVe rows"
        vectors[text.n_learned_words :] = torch.from_numpy(pretrained)
        vectors[0] = 0.0
        return cls(MSEM(config, vectors), text, device=device)

    @classmethod
    def _create_minilm(
        cls, overrides: Mapping[str, Any], device: str | None, minilm: MiniLMText | None,
        cache_dir: str | Path | None = None,
    ) -> "MsemEncoder":
        """The minilm variant: no vocabulary to build (MiniLM's wordpieces), `word_dim` defaults to 384
        (the states go to the BiGRU as they are). `minilm` reuses an already loaded MiniLMText."""
        base = overrides["word_repr"]
        text = minilm if minilm is not None else MiniLMText(base=base, cache_dir=cache_dir)
        config = MsemConfig(
            word_vocab_size=text.vocab_size,
            char_vocab_size=2,
            n_learned_words=2,
            **{"word_dim": TOKEN_BASES[base][1], "use_char": False, **overrides},
        )
        model = MSEM(config)
        init_minilm_layers(model, text)
        return cls(model, text, device=device)

    def __repr__(self) -> str:
        return f"MsemEncoder(id={self.id!r}, dim={self.dim}, device={self.device!r}, text={self.text!r})"


def init_minilm_layers(model: MSEM, text: MiniLMText) -> None:
    """Copy the base's top `minilm_train_layers` layers into the model's trainable `embed.top` (and, for
    mpnet, its relative position bias into `embed.rel_bias`)."""
    first = text.total_layers - model.config.minilm_train_layers
    for i, layer in enumerate(model.embed.top):
        layer.load_hf_state(text.layer_state(first + i))
    if getattr(model.embed, "rel_bias", None) is not None:
        with torch.no_grad():
            model.embed.rel_bias.weight.copy_(text.transformer.encoder.relative_attention_bias.weight)


def read_config(path: Path) -> MsemConfig:
    """config.json -> MsemConfig, checking the format version and naming unknown fields."""
    meta = read_model_config(path, FORMAT_VERSION, "msem", default_architecture="msem")
    meta.pop("weights_dtype", None)
    unknown = sorted(set(meta) - MsemConfig.field_names())
    if unknown:
        raise ValueError(f"{path}: unknown MsemConfig fields {unknown}")
    return MsemConfig(**meta)


def _state_dict_sha256(state: Mapping[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        digest.update(key.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
