"""The compiled encoder runtime: a sentence-transformers model (all-MiniLM-L6-v2, all-mpnet-base-v2)
exported once to ONNX, optionally quantised to int8, and run with ONNX Runtime instead of eager PyTorch.

Why: a query is ~10 wordpieces, where eager PyTorch spends most of its time in Python and per-op
dispatch, not in arithmetic; ONNX Runtime fuses the graph (attention, GELU, LayerNorm) and, in int8,
runs the matrix products with the CPU's integer dot-product instructions (3x faster with AVX-512 VNNI
than with AVX2 alone, so record the CPU with every timing).

    texts --tokenizers (Rust, truncation at the model's max_seq_length)--> input_ids, attention_mask (B,T)
          --ONNX graph: transformer -> masked mean pool -> L2 normalise--> sentence (B,d)
                                     \\-> token_states (B,T,d) (the token-state models: MSEM, MMAICM)

Runtimes (`FAQ_ENCODER_RUNTIME`):
- `onnx-int8`: dynamic int8 (weights int8 per output channel, activations quantised per batch at run
  time). A sentence's vector moves slightly with its batch-mates (the activation scale is the batch's).
- `onnx`: the same graph in fp32: equal to PyTorch up to float rounding.
- `torch`: eager PyTorch (models/encoders/pretrained.py), the reference; the only one on CUDA.
- `auto`: `torch` on CUDA, else `onnx-int8`.

The exports live in `<model cache>/onnx/<model>-<sha256(weights)[:12]>/` (`model.onnx`, `model.int8.onnx`,
`export.json` with each file's size and sha256). They are written once under a file lock, and a load
whose file does not have the recorded size (a truncated copy) exports again; `faq model onnx` also
checks the sha256.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from models.encoders.base import file_lock, file_sha256, l2_normalise

RUNTIMES = ("auto", "onnx-int8", "onnx", "torch")
FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
EXPORT_META = "export.json"
# 2: the int8 file is checked against PyTorch too (format 1 kept int8 files that this CPU's kernel broke)
EXPORT_FORMAT = 2
OPSET = 17
#: the least cosine to PyTorch an int8 file may have on the check sentences (mpnet: 0.967 where int8 works)
MIN_INT8_COSINE = 0.95


class RuntimeUnavailable(RuntimeError):
    """A runtime was asked for that cannot run here (no onnxruntime, CUDA with ONNX, a bad export)."""


def resolve_runtime(requested: str | None, device: str) -> str:
    """`auto` -> `torch` on CUDA (the GPU is faster than int8 on CPU), else `onnx-int8`; ONNX on CUDA is
    refused rather than silently run on the CPU."""
    requested = requested or "auto"
    if requested not in RUNTIMES:
        raise RuntimeUnavailable(f"encoder runtime must be one of {', '.join(RUNTIMES)}, got {requested!r}")
    if requested == "auto":
        return "torch" if device.startswith("cuda") else "onnx-int8"
    if requested != "torch" and device.startswith("cuda"):
        raise RuntimeUnavailable(f"encoder runtime {requested!r} runs on the CPU only; on CUDA use 'torch' or 'auto'")
    return requested


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# export


def _sentence_graph(transformer):
    """What is exported: the transformer, then the sentence-transformers mean pooling and L2
    normalisation, so one ONNX call gives the final vector (and the token states for the models that
    read them). Built here so that serving, which only runs the ONNX file, never imports torch."""
    import torch

    class SentenceGraph(torch.nn.Module):
        def __init__(self, body):
            super().__init__()
            self.body = body

        def forward(self, input_ids, attention_mask):
            states = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B,T,d)
            m = attention_mask.unsqueeze(-1).to(states.dtype)  # (B,T,1)
            mean = (states * m).sum(1) / m.sum(1).clamp(min=1e-9)  # (B,d)
            sentence = mean / mean.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            return sentence, states

    return SentenceGraph(transformer).eval()


def _weights_file(source: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (source / name).is_file():
            return source / name
    raise RuntimeUnavailable(f"{source}: no model.safetensors or pytorch_model.bin to export")


def export_dir_for(source: str | Path, cache_dir: str | Path, name: str) -> Path:
    """Where the exports of the model in `source` live: keyed by its weights' checksum, so new weights
    get a new export and an old one is never served for them."""
    sha = _source_sha(Path(source))
    return Path(cache_dir) / "onnx" / f"{name}-{sha[:12]}"


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def _source_sha(source: Path) -> str:
    """sha256 of the source weights, memoised per (path, size, mtime): mpnet's 438 MB take a second."""
    weights = _weights_file(source)
    st = weights.stat()
    key = (str(weights.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_MEMO:
        _SHA_MEMO[key] = file_sha256(weights)
    return _SHA_MEMO[key]


def _read_meta(folder: Path) -> dict | None:
    try:
        meta = json.loads((folder / EXPORT_META).read_text())
    except (OSError, ValueError):
        return None
    return meta if meta.get("format") == EXPORT_FORMAT else None


def export_valid(folder: Path, file: str, verify_sha: bool = False) -> bool:
    """`file` exists in `folder` with the size its export.json recorded (and, with `verify_sha`, the
    sha256). Loads check the size only, as models/encoders/mpnet.py does for its cache: the sha256 was checked
    when the file was written, and re-hashing hundreds of MB would cost every start a second or more."""
    meta = _read_meta(folder)
    entry = (meta or {}).get("files", {}).get(file)
    path = folder / file
    if not entry or not path.is_file() or path.stat().st_size != entry["size"]:
        return False
    return not verify_sha or file_sha256(path) == entry["sha256"]


#: Layers from which each base keeps its FFN output projection in fp32 in the int8 file (None: every
#: MatMul weight int8). mpnet's FFN outputs carry activation outliers that one per-batch int8 scale
#: cannot hold: all-int8 vectors have cosine 0.86 (min 0.62) to fp32; keeping layers 6-11's FFN
#: output in fp32 gives 0.989 (min 0.967) at 1.4x the all-int8 latency (docs/results.md).
FP32_FFN_OUT_FROM: dict[str, int | None] = {"all-mpnet-base-v2": 6}


def int8_scheme(name: str) -> dict:
    """How the int8 file of model `name` is quantised (recorded in export.json; a changed scheme
    re-exports)."""
    return {"weights": "int8 per output channel", "ops": ["MatMul"], "fp32_ffn_out_from_layer": FP32_FFN_OUT_FROM.get(name)}


def quantize_int8(fp32_file: Path, out_file: Path, scheme: dict, reduce_range: bool = False) -> None:
    """Dynamic int8: MatMul weights int8 per output channel, activations quantised per call. Embedding
    lookups (Gather) stay fp32: quantising them cost mpnet 0.04 of cosine and saves no time.
    `reduce_range` keeps weights to 7 bits: on x86 CPUs without VNNI, ONNX Runtime's u8 x s8 kernel adds
    pairs of products in int16 and saturates on full-range weights (mpnet's cosine to PyTorch fell to 0.05
    on an AVX2-only AMD EPYC; 0.986 with 7-bit weights)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    keep: list[str] = []
    start = scheme.get("fp32_ffn_out_from_layer")
    if start is not None:
        for node in onnx.load(str(fp32_file), load_external_data=False).graph.node:
            # ".../encoder/layer.7/output/dense/MatMul": the FFN's output projection (not attention's)
            parts = node.name.split("/")
            if node.op_type == "MatMul" and "output" in parts and "attention" not in parts:
                layer = next((p for p in parts if p.startswith("layer.")), None)
                if layer is not None and int(layer.split(".")[1]) >= start:
                    keep.append(node.name)
    import logging

    logging.disable(logging.INFO)  # the quantiser logs a line per tensor on the root logger
    try:
        quantize_dynamic(str(fp32_file), str(out_file), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=list(scheme["ops"]), nodes_to_exclude=keep, reduce_range=reduce_range)
    finally:
        logging.disable(logging.NOTSET)


def export_sentence_model(source: str | Path, folder: str | Path, name: str, int8: bool = True) -> dict:
    """Export the sentence-transformers folder `source` to `folder`/model.onnx (fp32, dynamic batch and
    length) and, with `int8`, model.int8.onnx (`int8_scheme(name)`). Written to a temporary folder,
    checked against PyTorch, then moved into place file by file with export.json last. Returns
    export.json's content."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    source, folder = Path(source), Path(folder)
    started = time.perf_counter()
    graph = _sentence_graph(AutoModel.from_pretrained(str(source)).eval())
    tok = Tokenizer.from_file(str(source / "tokenizer.json"))
    tok.no_padding()
    sample = ["how do i reset my password", "i forgot my password and cannot log in to my account",
              "where is my parcel", "can i pay by card?"]
    ids, mask = OnnxSentenceEncoder.pad([e.ids for e in tok.encode_batch(sample)])
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=folder))
    try:
        with torch.inference_mode():
            torch.onnx.export(
                graph, (torch.from_numpy(ids), torch.from_numpy(mask)), str(tmp / FP32_FILE),
                input_names=["input_ids", "attention_mask"], output_names=["sentence", "token_states"],
                dynamic_axes={"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"},
                              "sentence": {0: "batch"}, "token_states": {0: "batch", 1: "length"}},
                opset_version=OPSET, dynamo=False,
            )
            reference = graph(torch.from_numpy(ids), torch.from_numpy(mask))[0].numpy()
        files = [FP32_FILE]

        def cosine(file: str) -> float:
            return float((_Session(tmp / file, threads=None).run(ids, mask)[0] * reference).sum(1).min())

        # kept only when fp32 reproduces PyTorch (padding included: the sample has mixed lengths)
        checks = {FP32_FILE: cosine(FP32_FILE)}
        if checks[FP32_FILE] < 0.9999:
            raise RuntimeUnavailable(f"ONNX export of {source} differs from PyTorch (cosine {checks[FP32_FILE]:.5f})")
        scheme = int8_scheme(name) if int8 else None
        reduce_range = False
        if scheme is not None:
            quantize_int8(tmp / FP32_FILE, tmp / INT8_FILE, scheme)
            checks[INT8_FILE] = cosine(INT8_FILE)
            if checks[INT8_FILE] < MIN_INT8_COSINE:  # this CPU's int8 kernel saturates: 7-bit weights
                reduce_range = True
                quantize_int8(tmp / FP32_FILE, tmp / INT8_FILE, scheme, reduce_range=True)
                checks[INT8_FILE] = cosine(INT8_FILE)
            if checks[INT8_FILE] < MIN_INT8_COSINE:
                raise RuntimeUnavailable(f"int8 export of {source} is too far from PyTorch on this CPU (cosine "
                                         f"{checks[INT8_FILE]:.4f} < {MIN_INT8_COSINE}): use FAQ_ENCODER_RUNTIME=onnx")
            files.append(INT8_FILE)
        meta = {
            "format": EXPORT_FORMAT, "model": name, "source": str(source), "source_sha256": _source_sha(source),
            "torch": torch.__version__, "opset": OPSET, "int8": scheme, "int8_reduce_range": reduce_range,
            "min_cosine_to_torch": checks, "seconds": round(time.perf_counter() - started, 1),
            "files": {f: {"size": (tmp / f).stat().st_size, "sha256": file_sha256(tmp / f)} for f in files},
        }
        for file in files:
            os.replace(tmp / file, folder / file)
        (tmp / EXPORT_META).write_text(json.dumps(meta, indent=2))
        os.replace(tmp / EXPORT_META, folder / EXPORT_META)
        return meta
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_export(source: str | Path, cache_dir: str | Path, name: str, runtime: str) -> Path:
    """The checked ONNX file for `runtime` ("onnx" | "onnx-int8"), exporting it first when missing,
    damaged or quantised by another scheme (once, under a lock: concurrent first loads wait for one)."""
    folder = export_dir_for(source, cache_dir, name)
    file = INT8_FILE if runtime == "onnx-int8" else FP32_FILE

    def ready() -> bool:
        meta = _read_meta(folder) or {}
        return export_valid(folder, file) and (file != INT8_FILE or meta.get("int8") == int8_scheme(name))

    if ready():
        return folder / file
    with file_lock(folder.parent / f".{folder.name}.lock"):
        if not ready():
            _say(f"exporting {name} to ONNX in {folder} (once; up to a few minutes) ...")
            meta = export_sentence_model(source, folder, name)
            _say(f"exported {name} in {meta['seconds']} s; cosine to PyTorch >= "
                 + ", ".join(f"{k} {v:.4f}" for k, v in meta["min_cosine_to_torch"].items()))
    return folder / file


# ------------------------------------------------------------------------------------------------
# running


class _Session:
    """One ONNX Runtime session. `threads` caps its intra-op pool (None: one per physical core)."""

    def __init__(self, path: str | Path, threads: int | None):
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - a dependency
            raise RuntimeUnavailable("the ONNX runtimes need the onnxruntime package") from exc
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # ONNX Runtime's idle pool threads spin after each call by default; on a 2-core host they then
        # take the cores from the search that runs right after the encoder (measured: the exact search
        # of a 15k build went from 0.6 to 4 ms per query)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def run(self, ids: np.ndarray, mask: np.ndarray, outputs: Sequence[str] = ("sentence",)) -> list[np.ndarray]:
        return self.session.run(list(outputs), {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)})


def read_max_seq_length(source: Path, default: int = 256) -> int:
    try:
        return int(json.loads((source / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError):
        return default


class OnnxSentenceEncoder:
    """A sentence-transformers model on ONNX Runtime behind the `Encoder` interface; also gives the
    token states (`token_states`) for the models that read a base's wordpieces.

    `encode` sorts the texts by length and pads each batch only to its longest member: a build's
    phrasings range from 2 to 40 wordpieces, and padding everyone to the longest wastes most of the work.
    """

    device = "cpu"

    def __init__(self, source: str | Path, id: str, dim: int, runtime: str, cache_dir: str | Path,
                 threads: int | None = None):
        from tokenizers import Tokenizer

        if runtime not in ("onnx", "onnx-int8"):
            raise RuntimeUnavailable(f"OnnxSentenceEncoder runs 'onnx' or 'onnx-int8', not {runtime!r}")
        self.source, self.id, self.dim, self.runtime = Path(source), id, dim, runtime
        self.max_len = read_max_seq_length(self.source)
        self.tokenizer = Tokenizer.from_file(str(self.source / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_len)
        self.file = ensure_export(self.source, cache_dir, id, runtime)
        self.session = _Session(self.file, threads)
        # the Rust tokenizer is shared state: one encode at a time (the service serialises anyway)
        self._lock = threading.Lock()

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=True)]

    @staticmethod
    def pad(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Wordpiece id lists -> (ids, mask) (B, longest) int64, zero-padded on the right."""
        width = max(len(r) for r in rows)
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        return ids, mask

    def _batches(self, texts: Sequence[str], batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(row indices, ids, mask) per batch, shortest texts first."""
        rows = self.tokenize(texts)
        order = np.argsort([len(r) for r in rows], kind="stable")
        for start in range(0, len(order), batch_size):
            idx = order[start: start + batch_size]
            ids, mask = self.pad([rows[i] for i in idx])
            yield idx, ids, mask

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress_bar: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        if len(texts) == 0:
            return out
        with self._lock:
            for idx, ids, mask in self._batches(texts, batch_size):
                out[idx] = self.session.run(ids, mask)[0]
        return l2_normalise(out)

    def states_for_ids(self, items: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Wordpiece id lists ([CLS] ... [SEP], the caller's truncation) -> each one's last-layer states,
        (len_i, dim) float32, in one call padded to the longest."""
        if len(items) == 0:
            return []
        ids, mask = self.pad(items)
        with self._lock:
            states = self.session.run(ids, mask, outputs=("token_states",))[0]
        return [np.ascontiguousarray(states[row, : len(r)], dtype=np.float32) for row, r in enumerate(items)]
