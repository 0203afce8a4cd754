"""`faq quickstart`: the main job on embedded defaults, as the same commands an operator runs by hand.

1. `faq kb import` the bundled demo FAQ (or --kb FILE);
2. `faq train msem` on that KB (its phrasings are the paraphrase clusters), unless the model folder
   already exists or `--encoder` names one (e.g. `--encoder minilm` to skip training);
3. `faq index build` with that encoder (the manifest records it, so the service serves with it);
4. `faq serve`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

DEMO_KB = Path(__file__).resolve().parent.parent / "demo" / "faq.jsonl"
#: our measured choice for the demo-sized KB: the MiniLM-token MSEM variant, compact sizes
QUICKSTART_CONFIG = '{"word_repr": "minilm", "hidden": 150, "ffn_dim": 600, "pool_da": 150, "out_dim": 300}'


def _run(step: list[str]) -> int:
    from app.cli.main import main

    print(f"$ faq {' '.join(step)}", flush=True)
    return main(step)


def _quickstart(args: argparse.Namespace) -> int:
    from app.settings import get_settings

    kb = args.kb or str(DEMO_KB)
    if rc := _run(["kb", "import", kb]):
        return rc
    encoder = args.encoder
    if encoder is None:
        model_dir = get_settings().data_dir / "models" / "msem-quickstart"
        if not (model_dir / "config.json").exists():
            rc = _run(["train", "msem", "--kb", kb, "--out", str(model_dir), "--epochs", str(args.epochs),
                       "--config", QUICKSTART_CONFIG, "--seed", "0"])
            if rc:
                return rc
        encoder = str(model_dir)
    if rc := _run(["index", "build", "--encoder", encoder]):
        return rc
    if args.no_serve:
        return 0
    return _run(["serve", "--host", args.host, "--port", str(args.port)])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="import the demo FAQ (or --kb FILE), train MSEM on it, build the index, serve /match")
    p.add_argument("--kb", help="knowledge base JSONL/CSV (default: the bundled demo FAQ)")
    p.add_argument("--encoder", help="skip training and build with this encoder ('minilm' or a model folder)")
    p.add_argument("--epochs", type=int, default=15, help="MSEM training epochs (default 15)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-serve", action="store_true", help="stop after building the index")
    p.set_defaults(func=_quickstart)
