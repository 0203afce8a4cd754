"""`faq train ...`: model training (`faq train msem`)."""
from __future__ import annotations

import argparse
import shlex
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    tr = subparsers.add_parser("train", help="train models")
    tr_sub = tr.add_subparsers(dest="train_command", metavar="SUBCOMMAND")
    p = tr_sub.add_parser(
        "msem",
        help="train an MSEM sentence encoder (multi-task: matching + intent classification)",
        description="Trains MSEM on KB paraphrases (variants of one FAQ) and/or labelled pairs. The best model "
        "(by --dev top-1 retrieval accuracy, else held-out pair accuracy) is saved as a model folder in --out, "
        "usable as `FAQ_ENCODER=<folder>` or `--model <folder>`.",
    )
    p.add_argument("--kb", action="append", help="KB file (JSONL/CSV): variants of one faq_id are paraphrases; "
                   "repeat to train on several (each file's faq_ids get its folder name as prefix)")
    p.add_argument("--pairs", action="append", help="labelled pairs TSV `label<TAB>q1<TAB>q2` (e.g. pairs_dev.tsv "
                   "from faq data prepare); repeatable")
    p.add_argument("--dev", help="dev queries JSONL {query, faq_id|null}: model selection by top-1 retrieval accuracy")
    p.add_argument("--dev-kb", help="KB the --dev queries are matched against (default: the training KB); FAQs "
                   "left out of training make the dev metric measure generalisation to new FAQs")
    p.add_argument("--out", required=True, help="output folder (model, checkpoint.pt, training.json, README.md)")
    p.add_argument("--init", help="fine-tune from this MSEM model folder (vocabulary extended, intent head re-created)")
    p.add_argument("--epochs", type=int, default=20, help="maximum epochs (default 20)")
    p.add_argument("--batch-size", type=int, default=200, help="pairs per batch (default 200, as in the paper)")
    p.add_argument("--lr", type=float, default=4e-4, help="Adam learning rate (default 4e-4)")
    p.add_argument("--sgd-lr", type=float, default=1e-3, help="SGD learning rate after the switch (default 1e-3)")
    p.add_argument("--patience", type=int, default=2, help="stalled epochs after the SGD switch before stopping")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", help="MsemConfig overrides: a JSON object or a JSON file (e.g. '{\"hidden\": 150}')")
    p.add_argument("--max-minutes", type=float, help="wall-clock budget; the running epoch is cut short")
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt")
    p.add_argument("--hard-refresh", type=int, default=1, help="re-mine hard negatives with the model every N epochs")
    p.add_argument("--device", help="cuda | cpu (default: cuda when available)")
    p.set_defaults(func=cmd_msem)
    tr.set_defaults(func=lambda args: (tr.print_help(), 2)[1])


def cmd_msem(args: argparse.Namespace) -> int:
    from app.kb_io import KbValidationError
    from models.pairs import PairFileError
    from models.train_msem import TrainConfig, TrainError, train_msem

    if not args.kb and not args.pairs:
        print("error: give --kb and/or --pairs", file=sys.stderr)
        return 2
    if args.resume and args.init:
        print("error: --resume continues a run; --init starts one (give one of them)", file=sys.stderr)
        return 2
    cfg = TrainConfig(
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, sgd_lr=args.sgd_lr, patience=args.patience,
        seed=args.seed, max_minutes=args.max_minutes, hard_refresh_every=args.hard_refresh,
    )
    command = "faq " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else None
    try:
        summary = train_msem(
            args.kb, args.out, pairs_path=args.pairs, dev_path=args.dev, dev_kb_path=args.dev_kb, init_dir=args.init,
            config_overrides=args.config, train_config=cfg, resume=args.resume, device=args.device, command=command,
        )
    except (TrainError, KbValidationError, PairFileError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{summary['stop_reason']}: best {summary['metric']} = {summary['best_metric']} at epoch "
          f"{summary['best_epoch']}; model saved in {args.out}")
    return 0
