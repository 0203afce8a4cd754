"""`faq train query-encoder --teacher-pack ...` for a machine that has PyTorch and transformers but not the
service's other dependencies (the CLI needs pydantic-settings for its model settings): the same
`train_query_encoder` call, with the device and model cache given here.

    python scripts/gpu/train_query_encoder.py --teacher-pack PACK --out DIR --kb F... --dev F... \
        --train-layers 6 --epochs 30 --max-minutes 3 [--typos 0.3]
"""
from __future__ import annotations

import argparse
import json
import logging


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher-pack", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="var/query-encoder")
    ap.add_argument("--kb", action="append", default=[])
    ap.add_argument("--dev", action="append", default=[])
    ap.add_argument("--train-layers", type=int, default=6)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--patience", type=int, default=3)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--epoch-sentences", type=int)
    ap.add_argument("--typos", type=float, default=0.0)
    ap.add_argument("--max-minutes", type=float)
    ap.add_argument("--device")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from training.query_encoder import QueryEncoderConfig, train_query_encoder

    cfg = QueryEncoderConfig(train_layers=args.train_layers, epochs=args.epochs, patience=args.patience, lr=args.lr,
                             batch_size=args.batch_size, epoch_sentences=args.epoch_sentences, typos=args.typos,
                             max_minutes=args.max_minutes)
    report = train_query_encoder(args.out, data_dir=None, kb_files=args.kb, work=args.work, config=cfg,
                                 runtime="torch", device=args.device, dev_files=args.dev,
                                 teacher_pack=args.teacher_pack)
    tuned = report.get("fine_tune", {})
    print(json.dumps({"out": args.out, "kept": tuned.get("kept"), "dev_top1_start": tuned.get("dev_top1_start"),
                      "best": tuned.get("best_metric"), "epochs_done": tuned.get("epochs_done")}), flush=True)


if __name__ == "__main__":
    main()
