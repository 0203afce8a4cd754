"""A model is a folder with a `config.json`: its format version, its architecture and the model's
config fields. One reader for every model kind (MSEM, MMAICM, analogy, Siamese), and for telling them
apart; the JSON writer and the weights loader their folders share."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"


def read_model_config(path: str | Path, format_version: int, architecture: str,
                      default_architecture: str | None = None) -> dict[str, Any]:
    """config.json -> the model's own fields, after checking its format version and architecture (a
    config without one counts as `default_architecture`: folders written before it was recorded)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing model config")
    meta = json.loads(path.read_text(encoding="utf-8"))
    version = meta.pop("format_version", None)
    if version != format_version:
        raise ValueError(f"{path}: format_version {version!r} unsupported (expected {format_version})")
    found = meta.pop("architecture", default_architecture)
    if found != architecture:
        raise ValueError(f"{path}: architecture {found!r} is not {architecture!r}")
    return meta


def architecture_of(folder: str | Path) -> str | None:
    """The architecture a model folder's config names; None when it names none or cannot be read (the
    loader of the kind tried next then says what is wrong)."""
    try:
        meta = json.loads((Path(folder) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta.get("architecture") if isinstance(meta, dict) else None


def write_json(path: Path, value: Any) -> None:
    """Write through a temporary file and rename: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_weights(module: Any, weights: Path) -> None:
    """A folder's safetensors weights into `module` (a torch nn.Module), which must fit them exactly."""
    from safetensors.torch import load_file

    if not weights.exists():
        raise FileNotFoundError(f"{weights}: missing model weights")
    missing, unexpected = module.load_state_dict(load_file(str(weights), device="cpu"), strict=False)
    if missing or unexpected:
        raise ValueError(f"{weights}: weights do not fit the config: missing {missing}, unexpected {unexpected}")
