"""`faq train smalltalk`: fit the small-talk detector and write its folder (models/small_talk/detectors/<encoder>
ships with the service)."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETS = REPO / "evaluation" / "data"
REALISTIC = ("campus_it", "council", "energy", "grocery")


def register(tr_sub: argparse._SubParsersAction) -> None:
    p = tr_sub.add_parser(
        "smalltalk", help="train the small-talk detector (models/small_talk/detectors/)",
        description="Fits the detector that answers small talk ('hi', 'thanks', 'are you a bot?') instead of "
        "matching it: the labelled small talk of --talk as its kinds; the KB files' questions and queries, "
        "CLINC150's and banking77's utterances and those requests wrapped in small talk as requests. With "
        "--encoder it also reads that encoder's vectors of the text (the service picks the detector of the "
        "encoder it serves with, else the text-only one).")
    p.add_argument("--talk", default=str(SETS / "smalltalk" / "train.jsonl"), help="{text, kind} JSONL")
    p.add_argument("--requests", action="append", default=None,
                   help="a KB file or query set whose texts are requests (repeatable; default: the realistic "
                        "sets' faq.jsonl and dev.jsonl and the demo KB)")
    p.add_argument("--clinc", default=None, help="CLINC150 data_full.json (its small-talk intents and requests)")
    p.add_argument("--banking", default=None, help="banking77 train.csv (requests)")
    p.add_argument("--encoder", default=None, help="minilm | mpnet | a model folder: read its vectors too")
    p.add_argument("--embedding-scale", type=float, default=10.0)
    p.add_argument("--out", required=True, help="the detector folder to write")
    p.set_defaults(func=cmd_small_talk)


def cmd_small_talk(args: argparse.Namespace) -> int:
    from app.conversation.small_talk.answers import KINDS
    from training.small_talk import SmallTalkConfig, collect, fit

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    files = [Path(f) for f in args.requests] if args.requests else (
        [SETS / kb / name for kb in REALISTIC for name in ("faq.jsonl", "dev.jsonl")]
        + [REPO / "app" / "demo" / "faq.jsonl", REPO / "app" / "demo" / "queries.jsonl"])
    cfg = SmallTalkConfig(embedding_scale=args.embedding_scale)
    data = collect(Path(args.talk), files, clinc=Path(args.clinc) if args.clinc else None,
                   banking=Path(args.banking) if args.banking else None, cfg=cfg)
    vectors, encoder_id = None, None
    if args.encoder:
        from models.encoders.load import load_encoder

        encoder = load_encoder(args.encoder)
        encoder_id = encoder.id
        logging.info("small talk: encoding %d texts with %s", len(data.texts), encoder_id)
        vectors = encoder.encode(data.texts, batch_size=64)
    detector = fit(data.talk, data.requests, KINDS, cfg, vectors, encoder_id)
    detector.save(args.out)
    print(f"wrote {args.out}: {len(detector.index)} text features"
          + (f" + {detector.dim} dims of {encoder_id}" if encoder_id else "") + f", classes {', '.join(detector.classes)}")
    return 0
