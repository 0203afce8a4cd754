"""The cross-encoder re-ranker: `[CLS] query [SEP] candidate [SEP]` -> one calibrated match probability.

A bi-encoder compares two independently pooled vectors, so "increase my limit" and "decrease my limit"
land next to each other; a cross-encoder reads both texts in one Transformer pass (every layer attends
across the pair) and can see the one word that flips the meaning. Built as in
`../shared/papers/stl-cross-encoder-qqp-stsb.txt` (sequential transfer: binary paraphrase pairs, then
STS-B regression; training lives in training/cross_encoder/).

    CrossEncoder      a Transformer body (the first `n_layers` of the base: all-MiniLM-L6-v2's BERT, 6 layers,
                      or all-mpnet-base-v2's MPNet, 12) -> masked mean pool -> Linear heads:
                        column 0: the match logit (phase A, binary equivalence)
                        column 1: the STS logit (phase B, regression on STS-B), when `sts_head`
    Reranker          tokenizer + a runtime (ONNX Runtime int8 / fp32, or PyTorch) + calibration
                      .score(query, candidates) -> float32 P(match) in 0..1 from the match logit (one forward pass)
                      .similarity(pairs) -> sigmoid(STS logit): the STS-B regression output (score / 5)
    load_reranker(path)   a model folder: config.json, model.safetensors, tokenizer files,
                          model.onnx / model.int8.onnx (written by `export_onnx`)

Pooling is a masked mean over the pair's tokens, not [CLS]: the initial weights come from a bi-encoder
trained with mean pooling, whose [CLS] state was never trained for anything. Padding never changes a
pair's score (attention masks padded keys, the pool ignores them), so a pair scores the same whatever
its batch-mates are (tested).

Two heads (`sts_head`, ours): the paper replaces the classification head by a regression head in phase
B; measured here, that regression erased the phase A sensitivity to one flipped word (STS-B scores
"increase" vs "decrease" as fairly similar), so the default keeps the phase A head for matching and adds
a regression head for STS-B (phase B rehearses phase A batches; training/cross_encoder/). A folder with a
single head (`sts_head: false`, the paper's recipe) serves its one logit for both.

Calibration: `p = sigmoid(a * match_logit + b)` is fitted after training on held-out binary pairs
(config.json `calibration`: {a, b, source}, read as a models/calibration.py `Calibration`).

Fusion with the first stage (`score(..., prior=p_first, weight=w)`): the service's candidates already
carry a calibrated probability from the encoder's cosine. The returned score is then the logarithmic
opinion pool sigmoid(w * logit(p_cross) + (1 - w) * logit(p_first)), still a probability in 0..1;
w = 1 is the cross-encoder alone (the paper), w = 0 the first stage alone. Default w: config
`fusion_weight` (`faq train reranker` writes 0.3, the weight dev data chose on CLINC150; 1.0 in a bare
config), overridden by FAQ_RERANK_WEIGHT.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from models.calibration import Calibration
from models.scoring import logit, pool, sigmoid  # noqa: F401  (pool: the fusion, served from here too)

FORMAT = "faq-reranker/1"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ONNX_FILE = "model.onnx"
ONNX_INT8_FILE = "model.int8.onnx"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
#: runtimes `load_reranker` understands; "auto" = the best one the folder has
RUNTIMES = ("auto", "onnx-int8", "onnx", "torch")
#: pretrained bodies a cross-encoder starts from: short name -> the model's name and layer count
BASES = {
    "minilm": {"name": "all-MiniLM-L6-v2", "layers": 6},
    "mpnet": {"name": "all-mpnet-base-v2", "layers": 12},
}
BASE_NAMES = {v["name"]: k for k, v in BASES.items()}


def base_path(base: str, cache_dir: str | Path | None = None) -> str:
    """The packaged weights of a base (short name): MiniLM's package, or mpnet reassembled into the model
    cache `cache_dir` (None: models/encoders/mpnet.py's default)."""
    if base == "minilm":
        from models.encoders.pretrained import minilm_path

        return minilm_path()
    if base == "mpnet":
        from models.encoders.mpnet import mpnet_path

        return mpnet_path(cache_dir)
    raise RerankerError(f"unknown base {base!r} (one of {sorted(BASES)})")


class RerankerError(ValueError):
    """A re-ranker folder is missing, incomplete or of another format."""


@dataclass
class RerankerConfig:
    n_layers: int = 4  # first layers of all-MiniLM-L6-v2 kept (6 = all)
    max_len: int = 64  # pair length in wordpieces, [CLS]/[SEP]s included; longer pairs are truncated
    pooling: str = "mean"  # "mean" (masked) or "cls"
    sts_head: bool = False  # a second, regression head for STS (see the module docstring)
    fusion_weight: float = 1.0  # w of the pool with the first stage's probability (1 = cross-encoder alone)
    # the body's transformers config (BertConfig or MPNetConfig .to_dict(); `model_type` says which)
    bert: dict[str, Any] = field(default_factory=dict)
    # p(match) = sigmoid(a * logit + b); identity until fitted after training
    calibration: dict[str, Any] = field(default_factory=lambda: {"a": 1.0, "b": 0.0, "source": "identity"})
    base: str = "all-MiniLM-L6-v2"
    format: str = FORMAT

    def validate(self) -> None:
        if self.base not in BASE_NAMES:
            raise RerankerError(f"base must be one of {sorted(BASE_NAMES)}, got {self.base!r}")
        if not 1 <= self.n_layers <= BASES[BASE_NAMES[self.base]]["layers"]:
            raise RerankerError(f"n_layers must be in 1..{BASES[BASE_NAMES[self.base]]['layers']} for {self.base}, "
                                f"got {self.n_layers}")
        if not 8 <= self.max_len <= 512:
            raise RerankerError(f"max_len must be in 8..512, got {self.max_len}")
        if self.pooling not in ("mean", "cls"):
            raise RerankerError(f"pooling must be 'mean' or 'cls', got {self.pooling!r}")


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# ---------------------------------------------------------------------------------------------
# the network
# ---------------------------------------------------------------------------------------------
def _torch():
    import torch

    return torch


def build_module(config: RerankerConfig, init_from_base: bool = False, cache_dir: str | Path | None = None):
    """The `CrossEncoder` nn.Module for `config`; with `init_from_base`, the body is the first `n_layers`
    layers of the packaged base model (`config.base`, mpnet found in the model cache `cache_dir`; the heads
    are new)."""
    _offline()
    torch = _torch()
    from torch import nn
    from transformers import AutoConfig, AutoModel

    class CrossEncoder(nn.Module):
        def __init__(self, body, pooling: str, sts_head: bool):
            super().__init__()
            self.bert = body  # the attribute keeps its first name: saved weights are keyed "bert.*"
            self.pooling = pooling
            # MPNet has no segment embeddings: it tells the two texts apart by its </s></s> separator only
            self.uses_token_types = body.config.model_type == "bert"
            self.head = nn.Linear(body.config.hidden_size, 1)
            nn.init.normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)
            self.sts_head = nn.Linear(body.config.hidden_size, 1) if sts_head else None
            if self.sts_head is not None:
                nn.init.normal_(self.sts_head.weight, std=0.02)
                nn.init.zeros_(self.sts_head.bias)

        def forward(self, input_ids, attention_mask, token_type_ids):
            extra = {"token_type_ids": token_type_ids} if self.uses_token_types else {}
            states = self.bert(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
            if self.pooling == "cls":
                pooled = states[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(states.dtype)
                pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            out = self.head(pooled)
            if self.sts_head is not None:
                out = torch.cat([out, self.sts_head(pooled)], dim=-1)
            return out  # (batch, 1 or 2): match logit [, STS logit]

    config.validate()
    if init_from_base:
        body = AutoModel.from_pretrained(
            base_path(BASE_NAMES[config.base], cache_dir), num_hidden_layers=config.n_layers, add_pooling_layer=False,
            attn_implementation="eager",
        )
        config.bert = body.config.to_dict()
    else:
        if not config.bert:
            raise RerankerError("config has no `bert` section")
        data = {**config.bert, "num_hidden_layers": config.n_layers}
        body_cfg = AutoConfig.for_model(data.pop("model_type", "bert"), **data)
        body_cfg._attn_implementation = "eager"  # plain masked softmax: identical math in torch and ONNX
        body = AutoModel.from_config(body_cfg, add_pooling_layer=False)
    return CrossEncoder(body, config.pooling, config.sts_head)


# ---------------------------------------------------------------------------------------------
# pair formatting
# ---------------------------------------------------------------------------------------------
def load_tokenizer(path: str | Path | None = None, base: str = "minilm", cache_dir: str | Path | None = None):
    """The base's tokenizer: from a re-ranker folder, else from the packaged base (short name; mpnet's in
    the model cache `cache_dir`)."""
    _offline()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path if path is not None else base_path(base, cache_dir)))


def encode_pairs(tokenizer, queries: Sequence[str], candidates: Sequence[str], max_len: int) -> dict[str, np.ndarray]:
    """`[CLS] query [SEP] candidate [SEP]` wordpieces (MPNet: `<s> query </s></s> candidate </s>`), token
    types 0 for the query part and 1 for the candidate part (MPNet ignores them), padded to the longest pair of THIS batch (dynamic padding), int64 arrays."""
    if len(queries) != len(candidates):
        raise ValueError(f"{len(queries)} queries but {len(candidates)} candidates")
    enc = tokenizer(
        list(queries), list(candidates), truncation="longest_first", max_length=max_len,
        padding="longest", return_tensors="np", return_token_type_ids=True,
    )
    return {k: np.ascontiguousarray(enc[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}


def format_pair(tokenizer, query: str, candidate: str, max_len: int = 64) -> str:
    """The model's view of one pair as text (for tests and debugging): `[CLS] q [SEP] c [SEP]`."""
    ids = encode_pairs(tokenizer, [query], [candidate], max_len)["input_ids"][0]
    return tokenizer.decode(ids.tolist())


# ---------------------------------------------------------------------------------------------
# runtimes
# ---------------------------------------------------------------------------------------------
class _TorchRuntime:
    name = "torch"

    def __init__(self, module, device: str):
        self.module = module.eval().to(device)
        self.device = device

    def logits(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        torch = _torch()
        with torch.inference_mode():
            t = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
            out = self.module(t["input_ids"], t["attention_mask"], t["token_type_ids"]).float().cpu().numpy()
            return out.reshape(len(out), -1)


class _OnnxRuntime:
    def __init__(self, path: Path, threads: int | None, name: str):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.name = name

    def logits(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        feed = {k: v for k, v in batch.items() if k in self.inputs}
        out = np.asarray(self.session.run(None, feed)[0], dtype=np.float32)
        return out.reshape(len(out), -1)  # (batch, heads)


class Reranker:
    """A loaded re-ranker: `score(query, candidates)` for the service, `score_pairs` for evaluations."""

    def __init__(self, config: RerankerConfig, tokenizer, runtime, path: str | None = None):
        self.config = config
        self.tokenizer = tokenizer
        self.runtime = runtime
        self.path = path
        self.calibration = Calibration.from_dict(config.calibration)
        # HF fast tokenizers are not thread-safe and a forward pass already uses every intra-op thread:
        # one pass at a time
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return f"cross-encoder-{BASE_NAMES.get(self.config.base, 'minilm')}-L{self.config.n_layers}:{self.runtime.name}"

    # -- the service entry point ---------------------------------------------------------------
    def score(self, query: str, candidates: Sequence[str], prior: Sequence[float] | None = None,
              weight: float | None = None) -> np.ndarray:
        """Calibrated P(candidate means the same as query), float32 (len(candidates),), ONE forward pass.
        With `prior` (the candidates' first-stage probabilities), the pool of both with weight `weight`
        (default config.fusion_weight) on the cross-encoder."""
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float32)
        probs = self.calibrate(self.logits([query] * len(candidates), list(candidates)))
        w = self.config.fusion_weight if weight is None else float(weight)
        if prior is None or w >= 1.0:
            return probs
        return pool(probs, np.asarray(prior, dtype=np.float64), w)

    # -- building blocks -----------------------------------------------------------------------
    def logits(self, queries: Sequence[str], candidates: Sequence[str], head: int = 0) -> np.ndarray:
        """One head's raw outputs for pairs (0 = match, -1 = STS, the same with one head), one forward pass
        (no batching: the caller sizes the batch)."""
        with self._lock:
            batch = encode_pairs(self.tokenizer, queries, candidates, self.config.max_len)
            return self.runtime.logits(batch)[:, head].astype(np.float32)

    def calibrate(self, logits: np.ndarray) -> np.ndarray:
        return self.calibration.prob(logits).astype(np.float32)

    def pair_logits(self, pairs: Sequence[tuple[str, str]], batch_size: int = 64, progress: bool = False,
                    head: int = 0) -> np.ndarray:
        """Logits for many pairs, batched by similar length (less padding); order preserved."""
        n = len(pairs)
        out = np.zeros(n, dtype=np.float32)
        if n == 0:
            return out
        order = sorted(range(n), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        bar = None
        if progress:
            import sys

            from tqdm import tqdm

            bar = tqdm(total=n, unit="pair", desc="scoring", file=sys.stderr, mininterval=5)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            out[idx] = self.logits([pairs[i][0] for i in idx], [pairs[i][1] for i in idx], head=head)
            if bar is not None:
                bar.update(len(idx))
        if bar is not None:
            bar.close()
        return out

    def score_pairs(self, pairs: Sequence[tuple[str, str]], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Calibrated probabilities for many (query, candidate) pairs."""
        return self.calibrate(self.pair_logits(pairs, batch_size, progress))

    def similarity(self, pairs: Sequence[tuple[str, str]], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """sigmoid(STS logit): the STS-B regression output in 0..1 (= score / 5), uncalibrated."""
        return sigmoid(self.pair_logits(pairs, batch_size, progress, head=-1)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# folders
# ---------------------------------------------------------------------------------------------
def read_config(path: str | Path) -> RerankerConfig:
    path = Path(path)
    cfg_file = path / CONFIG_FILE
    if not cfg_file.exists():
        raise RerankerError(f"no re-ranker at {path}: {CONFIG_FILE} missing (make one with `faq train reranker --out {path}`)")
    data = json.loads(cfg_file.read_text())
    if data.get("format") != FORMAT:
        raise RerankerError(f"{cfg_file}: format {data.get('format')!r} is not {FORMAT!r}")
    known = set(RerankerConfig.__dataclass_fields__)
    config = RerankerConfig(**{k: v for k, v in data.items() if k in known})
    config.validate()
    return config


def save_reranker(module, config: RerankerConfig, tokenizer, path: str | Path, extra: dict | None = None) -> Path:
    """Write config.json + model.safetensors (fp32) + tokenizer files. ONNX files are `export_onnx`'s."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().cpu().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(path / WEIGHTS_FILE))
    tokenizer.save_pretrained(str(path))
    data = asdict(config)
    if extra:
        data.update(extra)
    (path / CONFIG_FILE).write_text(json.dumps(data, indent=2) + "\n")
    # stale exports would serve the previous weights
    for name in (ONNX_FILE, ONNX_INT8_FILE):
        (path / name).unlink(missing_ok=True)
    return path


def load_module(path: str | Path, config: RerankerConfig | None = None):
    from safetensors.torch import load_file

    path = Path(path)
    config = config or read_config(path)
    if not (path / WEIGHTS_FILE).exists():
        raise RerankerError(f"{path}: {WEIGHTS_FILE} missing")
    module = build_module(config)
    missing, unexpected = module.load_state_dict(load_file(str(path / WEIGHTS_FILE)), strict=False)
    # position_ids buffers differ between transformers versions; anything else is a real mismatch
    missing = [k for k in missing if not k.endswith("position_ids")]
    unexpected = [k for k in unexpected if not k.endswith("position_ids")]
    if missing or unexpected:
        raise RerankerError(f"{path}: weights do not fit the config (missing {missing[:5]}, unexpected {unexpected[:5]})")
    return module.eval()


def load_reranker(path: str | Path, runtime: str = "auto", threads: int | None = None, device: str | None = None) -> Reranker:
    """Load a re-ranker folder. runtime: "auto" (int8 ONNX if the folder has it and onnxruntime is
    installed, else fp32 ONNX, else PyTorch), "onnx-int8", "onnx" or "torch". `threads` caps the
    intra-op threads (ONNX Runtime's own pool; PyTorch uses the process setting)."""
    if runtime not in RUNTIMES:
        raise RerankerError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
    path = Path(path)
    config = read_config(path)
    tokenizer = load_tokenizer(path)
    try:
        import onnxruntime  # noqa: F401

        have_ort = True
    except ImportError:
        have_ort = False
    from models.encoders.base import pick_device

    device = pick_device(device)
    if runtime == "auto":
        if device == "cuda" or not have_ort:
            runtime = "torch"
        elif (path / ONNX_INT8_FILE).exists():
            runtime = "onnx-int8"
        elif (path / ONNX_FILE).exists():
            runtime = "onnx"
        else:
            runtime = "torch"
    if runtime == "torch":
        rt = _TorchRuntime(load_module(path, config), device)
    else:
        file = path / (ONNX_INT8_FILE if runtime == "onnx-int8" else ONNX_FILE)
        if not file.exists():
            raise RerankerError(f"{path}: {file.name} missing (run `faq train reranker --export-only --out {path}`)")
        if not have_ort:
            raise RerankerError(f"runtime {runtime!r} needs the onnxruntime package")
        rt = _OnnxRuntime(file, threads, runtime)
    return Reranker(config, tokenizer, rt, str(path))


def export_onnx(path: str | Path, quantize: bool = True, per_channel: bool = True) -> list[Path]:
    """Export the folder's weights to model.onnx (fp32, dynamic batch and length) and, with
    `quantize`, model.int8.onnx (dynamic int8 quantisation of the MatMul weights, one scale per output
    channel: measured on the stress suite, per-tensor scales cost 0.056 accuracy, per-channel nothing)."""
    torch = _torch()
    path = Path(path)
    module = load_module(path)
    tokenizer = load_tokenizer(path)
    sample = encode_pairs(tokenizer, ["how do i reset my password"] * 2, ["i forgot my password", "close my account"], 64)
    args = tuple(torch.from_numpy(sample[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    tmp = path / (ONNX_FILE + ".tmp")
    torch.onnx.export(
        module, args, str(tmp), input_names=names, output_names=["logits"],
        dynamic_axes={**{n: {0: "batch", 1: "length"} for n in names}, "logits": {0: "batch"}},
        opset_version=17, dynamo=False,
    )
    os.replace(tmp, path / ONNX_FILE)
    written = [path / ONNX_FILE]
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp = path / (ONNX_INT8_FILE + ".tmp.onnx")
        reference = _OnnxRuntime(path / ONNX_FILE, None, "fp32").logits(sample)
        quantize_dynamic(str(path / ONNX_FILE), str(tmp), weight_type=QuantType.QInt8, per_channel=per_channel)
        if np.abs(_OnnxRuntime(tmp, None, "int8").logits(sample) - reference).max() > MAX_INT8_LOGIT_DRIFT:
            # x86 CPUs without VNNI add int8 products in int16 and saturate on full-range weights: 7 bits
            quantize_dynamic(str(path / ONNX_FILE), str(tmp), weight_type=QuantType.QInt8, per_channel=per_channel,
                             reduce_range=True)
        os.replace(tmp, path / ONNX_INT8_FILE)
        written.append(path / ONNX_INT8_FILE)
    return written


#: how far the int8 file's logits may be from fp32's on the export sample before it is quantised with 7-bit
#: weights (an mpnet body's logits drifted 1.15 on an AVX2-only CPU, 0.011 with 7-bit weights; 0.017 where int8 works)
MAX_INT8_LOGIT_DRIFT = 0.1
