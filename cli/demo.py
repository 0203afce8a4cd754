"""`faq quickstart`: the main job on embedded defaults, as the same commands an operator runs by hand.

1. `faq kb import` the bundled demo FAQ (or --kb FILE);
2. `faq train msem` on that KB: an MSEM on the default base's token states (all-mpnet-base-v2 when
   installed; else the shipped MiniLM MSEM is fine-tuned), measured on held-out phrasings against the
   base used zero-shot. The fine-tuned model is kept only when it is better, and a KB too thin to
   learn from is not trained on at all: either way the command says which encoder it kept and why.
   Skipped when this KB file was already trained on (its selection is reused), with `--no-fine-tune`
   or when `--encoder` names one;
3. `faq index build` with the kept encoder. The manifest records it, so the service serves with it;
4. `faq serve`.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

# shipped as package data of `app` (pyproject), so installed copies find it too
DEMO_KB = Path(__file__).resolve().parent.parent / "app" / "demo" / "faq.jsonl"
#: MSEM on mpnet's frozen token states, fused with mpnet's own sentence vector: the compact sizes that
#: train in minutes on a CPU (docs/results.md has the measurements behind the choice)
MPNET_MSEM_CONFIG = {"word_repr": "mpnet", "hidden": 150, "ffn_dim": 600, "pool_da": 150, "out_dim": 300,
                     "minilm_fusion": 0.5}


def _run(step: list[str]) -> int:
    from cli.main import main

    print(f"$ faq {' '.join(step)}", flush=True)
    return main(step)


def _quickstart(args: argparse.Namespace) -> int:
    from app.pipeline import encoder_spec
    from app.settings import get_settings

    kb = args.kb or str(DEMO_KB)
    if rc := _run(["kb", "import", kb]):
        return rc
    settings = get_settings()
    encoder = args.encoder
    if encoder is None and not args.no_fine_tune:
        encoder = _fine_tune(kb, settings, args.epochs)
        if isinstance(encoder, int):
            return encoder
    encoder = encoder or encoder_spec(settings)
    if rc := _run(["index", "build", "--encoder", encoder]):
        return rc
    if args.no_serve:
        return 0
    return _run(["serve", "--host", args.host, "--port", str(args.port)])


def _fine_tune(kb: str, settings, epochs: int) -> str | int:
    """Train (once) and return the encoder spec the selection kept, or the failing step's exit code."""
    from app.pipeline import default_encoder
    from models.encoder import file_sha256
    from models.train_msem import read_selection

    base = default_encoder(settings)
    # one folder per (base, KB content): a re-run on the same KB reuses the measured choice, another
    # KB (or an edited one) trains its own
    model_dir = settings.data_dir / "models" / f"msem-{base}-{file_sha256(kb)[:12]}"
    selection = read_selection(model_dir)
    if selection is None:
        step = ["train", "msem", "--kb", kb, "--out", str(model_dir), "--epochs", str(epochs), "--seed", "0",
                "--baseline", base]
        if base == "mpnet":
            step += ["--from-scratch", "--config", json.dumps(MPNET_MSEM_CONFIG)]
        if rc := _run(step):
            return rc
        selection = read_selection(model_dir)
    else:
        print(f"using the earlier fine-tuning in {model_dir}: kept {selection['kept']} ({selection['reason']})")
    return selection["encoder"] if selection else str(model_dir)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="import the demo FAQ (or --kb FILE), fine-tune an MSEM on it (kept only "
                       "when it beats the zero-shot base), build the index, serve /match")
    p.add_argument("--kb", help="knowledge base JSONL/CSV (default: the bundled demo FAQ)")
    p.add_argument("--encoder", help="build with this encoder ('mpnet', 'minilm', 'msem' or a model folder)")
    p.add_argument("--no-fine-tune", action="store_true", help="build with the default encoder as it is (no "
                   "training; fine-tuning goes to var/models/msem-<base>-<KB sha256>)")
    p.add_argument("--epochs", type=int, default=15, help="fine-tuning epochs (default 15)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-serve", action="store_true", help="stop after building the index")
    p.set_defaults(func=_quickstart)
