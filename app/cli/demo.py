"""`faq quickstart`: the main job on embedded defaults, as the same commands an operator runs by hand.

1. `faq kb import` the bundled demo FAQ (or --kb FILE);
2. `faq train msem` on that KB, fine-tuning the shipped general MSEM (models/default; its phrasings
   are the paraphrase clusters; a few minutes on a CPU), unless that model folder already exists,
   `--no-fine-tune` is given or `--encoder` names one;
3. `faq index build` with that encoder (`--no-fine-tune`: the shipped model as it is). The manifest
   records it, so the service serves with it;
4. `faq serve`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

DEMO_KB = Path(__file__).resolve().parent.parent / "demo" / "faq.jsonl"


def _run(step: list[str]) -> int:
    from app.cli.main import main

    print(f"$ faq {' '.join(step)}", flush=True)
    return main(step)


def _quickstart(args: argparse.Namespace) -> int:
    from app.settings import get_settings

    kb = args.kb or str(DEMO_KB)
    if rc := _run(["kb", "import", kb]):
        return rc
    settings = get_settings()
    encoder = args.encoder
    if encoder is None and not args.no_fine_tune:
        model_dir = settings.data_dir / "models" / "msem-finetuned"
        if not (model_dir / "config.json").exists():
            rc = _run(["train", "msem", "--kb", kb, "--out", str(model_dir), "--epochs", str(args.epochs),
                       "--seed", "0"])
            if rc:
                return rc
        encoder = str(model_dir)
    encoder = encoder or settings.encoder_spec(None)
    if rc := _run(["index", "build", "--encoder", encoder]):
        return rc
    if args.no_serve:
        return 0
    return _run(["serve", "--host", args.host, "--port", str(args.port)])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="import the demo FAQ (or --kb FILE), fine-tune the shipped MSEM on it, "
                       "build the index, serve /match")
    p.add_argument("--kb", help="knowledge base JSONL/CSV (default: the bundled demo FAQ)")
    p.add_argument("--encoder", help="build with this encoder ('msem', 'minilm' or a model folder)")
    p.add_argument("--no-fine-tune", action="store_true", help="build with the shipped MSEM as it is "
                   "(no training; fine-tuning goes to var/models/msem-finetuned)")
    p.add_argument("--epochs", type=int, default=15, help="fine-tuning epochs (default 15)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-serve", action="store_true", help="stop after building the index")
    p.set_defaults(func=_quickstart)
