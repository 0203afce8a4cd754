"""A query encoder that lands in another encoder's space: a small base, its sentence vector mapped to the
teacher's width.

FAQ phrasings and answers are encoded offline by the accurate encoder (the teacher, all-mpnet-base-v2);
queries are encoded per request, so their encoder is what a request pays for. `QueryEncoder` runs the fast
base (all-MiniLM-L6-v2, 384-d, on the same runtimes as the base itself) and maps its L2-normalised vector
into the teacher's 768-d space:

    base(text) -> m (384,) L2-normalised -> m W + b (768,) -> L2-normalised q      cos(q, teacher(faq))

W, b are fitted so that q lands where the teacher's vector of the same text would (`faq train
query-encoder`). The folder records the teacher it was fitted to (`teacher`, the teacher encoder's `id`),
so a build encoded by another encoder refuses it.

With `train_layers` N > 0 the base's top N transformer layers were trained too (`faq train query-encoder
--train-layers N`): the folder holds them (`top_layers.safetensors`, the HF checkpoint's names, fp16),
and the first load writes the base with those layers into the model cache (`<cache>/query/<sha>/`, a
complete sentence-transformers folder), which then runs like the base itself (int8 ONNX on a CPU).

Folder: `config.json` (`architecture` "query-encoder", `format_version` 1, `base`, `teacher`, `dim`,
`base_dim`, `train_layers`, `fit`), `projection.safetensors` (`weight` (base_dim, dim) fp32, `bias` (dim,)),
and with N > 0 `top_layers.safetensors`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from models.encoders.base import l2_normalise

ARCHITECTURE = "query-encoder"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "projection.safetensors"
TOP_LAYERS_FILE = "top_layers.safetensors"


class QueryEncoder:
    """`encode(texts) -> (n, dim)` float32, L2-normalised, in the teacher's space."""

    def __init__(self, base: Any, weight: np.ndarray, bias: np.ndarray, teacher: str, folder: str | Path | None = None):
        if weight.shape[0] != base.dim or weight.shape[1] != bias.shape[0]:
            raise ValueError(f"projection {weight.shape} + bias {bias.shape} does not fit a {base.dim}-d base")
        self.base = base
        self.weight = np.asarray(weight, dtype=np.float32)  # (base_dim, dim)
        self.bias = np.asarray(bias, dtype=np.float32)  # (dim,)
        self.teacher = teacher
        self.dim = int(weight.shape[1])
        self.runtime = getattr(base, "runtime", "torch")
        digest = hashlib.sha256(self.weight.tobytes() + self.bias.tobytes()).hexdigest()[:12]
        where = Path(folder).name if folder else "memory"
        self.id = f"query:{where}:{digest}"

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        m = self.base.encode(list(texts), batch_size=batch_size, show_progress_bar=show_progress_bar)  # (n, 384)
        return l2_normalise(m @ self.weight + self.bias)  # (n, 768)


def is_query_encoder(folder: str | Path) -> bool:
    path = Path(folder) / CONFIG_FILE
    if not path.exists():
        return False
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("architecture") == ARCHITECTURE
    except (OSError, ValueError):
        return False


def read_config(folder: str | Path) -> dict:
    path = Path(folder) / CONFIG_FILE
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.get("architecture") != ARCHITECTURE:
        raise ValueError(f"{path}: architecture {config.get('architecture')!r} is not {ARCHITECTURE!r}")
    if config.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: format_version {config.get('format_version')!r} unsupported (expected {FORMAT_VERSION})")
    return config


def save_query_encoder(folder: str | Path, weight: np.ndarray, bias: np.ndarray, *, base: str, teacher: str,
                       fit: dict | None = None, top_layers: dict[str, np.ndarray] | None = None,
                       train_layers: int = 0) -> Path:
    """The folder; `top_layers` (HF names `encoder.layer.{i}.*`, i counted in the whole base) with N > 0."""
    from safetensors.numpy import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    save_file({"weight": np.ascontiguousarray(weight, dtype=np.float32),
               "bias": np.ascontiguousarray(bias, dtype=np.float32)}, str(out / WEIGHTS_FILE))
    if train_layers:
        save_file({k: np.ascontiguousarray(v, dtype=np.float16) for k, v in (top_layers or {}).items()},
                  str(out / TOP_LAYERS_FILE))
    elif (out / TOP_LAYERS_FILE).exists():
        (out / TOP_LAYERS_FILE).unlink()
    config = {"architecture": ARCHITECTURE, "format_version": FORMAT_VERSION, "base": base, "teacher": teacher,
              "base_dim": int(weight.shape[0]), "dim": int(weight.shape[1]), "train_layers": int(train_layers),
              "fit": fit or {}}
    tmp = out / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / CONFIG_FILE)
    return out


def load_query_encoder(folder: str | Path, base: Any) -> QueryEncoder:
    """The folder's projection on `base`, the loaded encoder its config names (the caller loads it, on the
    runtime and device it serves)."""
    from safetensors.numpy import load_file

    config = read_config(folder)
    if getattr(base, "dim", None) != config["base_dim"]:
        raise ValueError(f"{folder}: fitted on a {config['base_dim']}-d base, got a {getattr(base, 'dim', None)}-d one")
    tensors = load_file(str(Path(folder) / WEIGHTS_FILE))
    return QueryEncoder(base, tensors["weight"], tensors["bias"], config["teacher"], folder=folder)


def materialise_base(folder: str | Path, cache_dir: str | Path) -> Path:
    """The base with the folder's trained top layers, as a sentence-transformers folder in the model cache
    (written once, under a lock; keyed by the layers' sha256)."""
    import shutil

    from models.encoders.base import file_lock, file_sha256

    config = read_config(folder)
    if config["base"] != "minilm":
        raise ValueError(f"{folder}: trained layers are supported on the minilm base, not {config['base']!r}")
    from models.encoders.pretrained import minilm_path

    layers_file = Path(folder) / TOP_LAYERS_FILE
    target = Path(cache_dir) / "query" / f"minilm-{file_sha256(layers_file)[:12]}"
    done = target / ".complete"
    if done.exists():
        return target
    with file_lock(str(target) + ".lock"):
        if done.exists():
            return target
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModel

        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(minilm_path(), tmp)
        model = AutoModel.from_pretrained(str(tmp))
        state = {k: v.float() for k, v in load_file(str(layers_file)).items()}
        missing = sorted(set(state) - set(model.state_dict()))
        if missing:
            raise ValueError(f"{layers_file}: parameters the base does not have: {missing[:3]}")
        with torch.no_grad():
            model.load_state_dict(state, strict=False)
        model.save_pretrained(str(tmp), safe_serialization=True)
        (tmp / ".complete").write_text("ok\n")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return target
