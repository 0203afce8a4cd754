"""A build's encode step on whatever device is present, as index/build.py `encode_in_batches` runs it (texts
shortest first, 1,024 per encoder call; that module is not imported, it needs annoy, which a bare GPU
machine may lack), with MiniLM and with all-mpnet-base-v2's architecture, sentences per second.

The mpnet timing may run on random weights (`--mpnet-config DIR`: a sentence-transformers folder without its
model.safetensors, filled with a random MPNet of the same shape): the cost of a forward pass does not depend
on the weights' values, and a machine that cannot receive the 420 MB model can still be timed.

    python scripts/gpu/encode_speed.py --texts corpus.txt --mpnet-config DIR --out speed.json
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", required=True)
    ap.add_argument("--mpnet-config", help="mpnet folder without weights: timed with random weights")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--batch-sizes", default="64,256")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch

    from models.encoders.base import pick_device
    from models.encoders.pretrained import MiniLMEncoder, PretrainedEncoder

    lines = Path(args.texts).read_text(encoding="utf-8").split("\n")
    texts = [t for t in lines if t][: args.limit or None]
    device = pick_device(None)
    report = {"device": torch.cuda.get_device_name(0) if device.startswith("cuda") else platform.processor(),
              "torch": torch.__version__, "texts": len(texts), "runs": []}
    def encode_in_batches(encoder, texts, batch_size):
        ordered = sorted(texts, key=len)
        for start in range(0, len(ordered), 1024):
            encoder.encode(ordered[start:start + 1024], batch_size=batch_size)

    encoders = [("minilm", lambda: MiniLMEncoder(device=device))]
    if args.mpnet_config:
        folder = Path("/tmp/mpnet-random")

        def mpnet():
            from transformers import AutoConfig, AutoModel

            shutil.copytree(args.mpnet_config, folder, dirs_exist_ok=True)
            torch.manual_seed(0)
            AutoModel.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
            return PretrainedEncoder(str(folder), "mpnet-architecture-random-weights", 768, device=device)

        encoders.append(("mpnet (random weights)", mpnet))
    for name, make in encoders:
        encoder = make()
        encode_in_batches(encoder, texts[:2048], 64)  # warm-up: kernels, allocator
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            encode_in_batches(encoder, texts, batch)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            row = {"encoder": name, "batch_size": batch, "seconds": round(seconds, 2),
                   "sentences_per_s": round(len(texts) / seconds, 1)}
            print(json.dumps(row), flush=True)
            report["runs"].append(row)
        del encoder
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
