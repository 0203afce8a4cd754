"""`faq quickstart`: the main job on embedded defaults, as the same commands an operator runs by hand.

1. `faq kb import` the bundled demo FAQ (or --kb FILE);
2. with `--dev FILE` (labelled user queries, JSONL {query, faq_id}), `faq train msem --dev FILE` on that
   KB: an MSEM on the default base's token states (all-mpnet-base-v2 when installed; else the shipped
   MiniLM MSEM is fine-tuned), measured on those queries against the base used zero-shot. The
   fine-tuned model is kept only when it is better, and a KB too thin to learn from is not trained on
   at all: either way the command says which encoder it kept and why. Skipped when this KB and dev file
   were already trained on (the selection is reused), with `--no-fine-tune` or when `--encoder` names
   one. Without `--dev` nothing is trained and the zero-shot base is served: held-out KB phrasings are
   written like the KB, not like users (a fine-tune that won on them lost on real user queries), so
   they cannot make a fair comparison. A bad --dev file (missing, unreadable, faq_ids not in the KB)
   stops it before anything is imported or trained;
3. `faq index build` with the kept encoder. The manifest records it, so the service serves with it;
4. `faq serve`.
"""
from __future__ import annotations

import argparse
import json
import sys
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
    from app.match.assembly import default_encoder, encoder_spec
    from app.settings import get_settings

    kb = args.kb or str(DEMO_KB)
    fine_tune = args.encoder is None and not args.no_fine_tune
    if args.dev and not fine_tune:
        print("error: --dev selects a fine-tuned model: it has no use with --no-fine-tune or --encoder",
              file=sys.stderr)
        return 2
    if args.dev and (error := _check_dev(kb, args.dev)):
        print(f"error: {error}", file=sys.stderr)
        return 2
    if rc := _run(["kb", "import", kb]):
        return rc
    settings = get_settings()
    encoder = args.encoder
    if fine_tune and not args.dev:
        encoder = encoder_spec(settings)
        print(f"serving the zero-shot {encoder} without fine-tuning, because no labelled user queries were given: "
              f"--dev FILE (JSONL {{query, faq_id}}) enables fine-tuning with a fair comparison (the fine-tune is "
              f"kept only if it beats {default_encoder(settings)} on those queries)", flush=True)
    elif fine_tune:
        encoder = _fine_tune(kb, args.dev, settings, args.epochs)
        if isinstance(encoder, int):
            return encoder
    encoder = encoder or encoder_spec(settings)
    if rc := _run(["index", "build", "--encoder", encoder]):
        return rc
    if args.no_serve:
        return 0
    return _run(["serve", "--host", args.host, "--port", str(args.port)])


def _check_dev(kb: str, dev: str) -> str | None:
    """What is wrong with the --dev file (missing, unreadable, no in-scope query, faq_ids the KB lacks), as
    `faq train msem --dev` says it; None when it is fine, or when the KB itself does not read (`kb import`
    then says why)."""
    from kb.records import KbValidationError
    from kb.files import read_kb
    from training.loop import TrainError
    from training.msem import read_dev_queries

    try:
        records = read_kb(kb)
    except (KbValidationError, OSError):
        return None
    try:
        read_dev_queries(dev, records)
    except TrainError as exc:
        return str(exc)
    return None


def _fine_tune(kb: str, dev: str, settings, epochs: int) -> str | int:
    """Train (once) and return the encoder spec the selection kept, or the failing step's exit code."""
    from app.match.assembly import default_encoder
    from models.encoders.base import file_sha256
    from training.msem import read_selection

    base = default_encoder(settings)
    # one folder per (base, KB content, dev content): a re-run on the same files reuses the measured
    # choice, another KB or dev file (or an edited one) trains its own
    model_dir = settings.data_dir / "models" / f"msem-{base}-{file_sha256(kb)[:12]}-{file_sha256(dev)[:12]}"
    selection = read_selection(model_dir)
    if selection is None:
        step = ["train", "msem", "--kb", kb, "--dev", dev, "--out", str(model_dir), "--epochs", str(epochs),
                "--seed", "0", "--baseline", base]
        if base == "mpnet":
            step += ["--from-scratch", "--config", json.dumps(MPNET_MSEM_CONFIG)]
        if rc := _run(step):
            return rc
        selection = read_selection(model_dir)
    else:
        print(f"using the earlier fine-tuning in {model_dir}: kept {selection['kept']} ({selection['reason']})")
    return selection["encoder"] if selection else str(model_dir)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="import the demo FAQ (or --kb FILE), with --dev fine-tune an MSEM on it "
                       "(kept only when it beats the zero-shot base on those user queries), build the index, "
                       "serve /match")
    p.add_argument("--kb", help="knowledge base JSONL/CSV (default: the bundled demo FAQ)")
    p.add_argument("--dev", help="labelled user queries JSONL {query, faq_id} (faq_ids of the KB): fine-tune an MSEM "
                   "and keep it only when it beats the zero-shot base on them (without --dev nothing is trained: "
                   "held-out KB phrasings are written like the KB, not like users)")
    p.add_argument("--encoder", help="build with this encoder ('mpnet', 'minilm', 'multilingual', 'msem' or a model folder)")
    p.add_argument("--no-fine-tune", action="store_true", help="build with the default encoder as it is (no "
                   "training; with --dev, fine-tuning goes to var/models/msem-<base>-<KB sha256>-<dev sha256>)")
    p.add_argument("--epochs", type=int, default=15, help="fine-tuning epochs (default 15)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-serve", action="store_true", help="stop after building the index")
    p.set_defaults(func=_quickstart)
