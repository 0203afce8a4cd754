"""`faq train ...`: model training (`faq train msem`, `faq train reranker`, `faq train mmaicm`, `faq train analogy`,
`faq train siamese`, `faq train query-encoder`, `faq train decision`, `faq train smalltalk`)."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from cli.train_small_talk import register as register_small_talk

def _command_line() -> str | None:
    """The command as typed, for a model folder's training report (re-running it reproduces the folder)."""
    return "faq " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else None


def _set_threads(threads: int | None) -> bool:
    """--threads: torch's intra-op threads; False (after saying why) when the value is unusable."""
    if threads is None:
        return True
    if threads < 1:
        print("error: --threads must be >= 1", file=sys.stderr)
        return False
    import torch

    torch.set_num_threads(threads)
    return True


def _model_settings(device: str | None) -> tuple[str | None, Path]:
    """(device, model cache) of a training command: its --device when given, else FAQ_DEVICE; the cache is
    FAQ_MODEL_CACHE (mpnet and the ONNX exports), as for the service."""
    from app.settings import get_settings

    settings = get_settings()
    return device or settings.device, settings.mpnet_cache


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
    p.add_argument("--dev", help="dev queries JSONL {query, faq_id|null}: labelled user queries; they pick the epoch "
                   "and are the only queries that decide whether the fine-tune beats --baseline")
    p.add_argument("--dev-kb", help="KB the --dev queries are matched against (default: the training KB); FAQs "
                   "left out of training make the dev metric measure generalisation to new FAQs")
    p.add_argument("--out", required=True, help="output folder (model, checkpoint.pt, training.json, README.md)")
    p.add_argument("--init", help="fine-tune from this MSEM model folder (vocabulary extended, intent head re-created); "
                   "default: the shipped general model (models/default) when there is one")
    p.add_argument("--from-scratch", action="store_true", help="start from random weights instead of the shipped model")
    p.add_argument("--epochs", type=int, default=20, help="maximum epochs (default 20)")
    p.add_argument("--batch-size", type=int, default=200, help="pairs per batch (default 200, as in the paper)")
    p.add_argument("--lr", type=float, default=4e-4, help="Adam learning rate (default 4e-4)")
    p.add_argument("--lr-decay", type=float, default=1.0,
                   help="Adam rate factor per epoch: epoch e runs at lr * decay**e (default 1 = constant, the paper)")
    p.add_argument("--sgd-lr", type=float, default=1e-3, help="SGD learning rate after the switch (default 1e-3)")
    p.add_argument("--patience", type=int, default=2, help="stalled epochs after the SGD switch before stopping")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", help="MsemConfig overrides: a JSON object or a JSON file (e.g. '{\"hidden\": 150}'; "
                                     "'{\"minilm_train_layers\": 2}' also trains MiniLM's top 2 layers, the best in-domain setting)")
    p.add_argument("--max-minutes", type=float, help="wall-clock budget; the running epoch is cut short")
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt")
    p.add_argument("--hard-refresh", type=int, default=1, help="re-mine hard negatives with the model every N epochs")
    p.add_argument("--device", help="cuda | cpu (default: cuda when available)")
    p.add_argument("--baseline", help="encoder the trained model must beat on --dev to be kept (default: the default "
                   "encoder, e.g. mpnet; 'none' keeps whatever was trained). Without --dev the base is kept (held-out "
                   "KB phrasings are written like the KB, not like users: measured for information only); a KB "
                   "with fewer than 10 multi-phrasing FAQs is then not trained on at all")
    p.add_argument("--fusion-grid", default="none",
                   help="fusion weights w to try after training on the --dev queries, e.g. "
                   "0.3,0.5,0.7,0.9 (models with minilm_fusion > 0; the best replaces the trained w in "
                   "config.json; without --dev they are measured on held-out KB phrasings and the trained w "
                   "stays). Default 'none': on a few hundred queries the choice follows noise (docs/results.md)")
    p.set_defaults(func=cmd_msem)
    _register_reranker(tr_sub)
    _register_mmaicm(tr_sub)
    _register_analogy(tr_sub)
    _register_siamese(tr_sub)
    _register_query_encoder(tr_sub)
    _register_decision(tr_sub)
    register_small_talk(tr_sub)
    tr.set_defaults(func=lambda args: (tr.print_help(), 2)[1])


def _default_init(config: str | None) -> tuple[str | None, str | None]:
    """(init folder, error): the shipped model, unless there is none; a --config that changes the
    architecture cannot fine-tune it and must say --from-scratch."""
    from models.encoders.load import default_msem_dir
    from training.loop import TrainError
    from training.msem import ARCHITECTURE_FIELDS, parse_config_overrides

    shipped = default_msem_dir()
    if not (shipped / "config.json").exists():
        return None, None
    try:
        overrides = parse_config_overrides(config)
    except TrainError as exc:
        return None, str(exc)
    import json

    shipped_config = json.loads((shipped / "config.json").read_text(encoding="utf-8"))
    changed = sorted(k for k, v in overrides.items() if k in ARCHITECTURE_FIELDS and shipped_config.get(k) != v)
    if changed:
        return None, (f"--config changes the architecture ({', '.join(changed)}), so it cannot fine-tune the shipped "
                      f"model {shipped}: add --from-scratch (or --init another folder)")
    print(f"fine-tuning the shipped model {shipped} (--from-scratch to start from random weights)", file=sys.stderr)
    return str(shipped), None


def cmd_msem(args: argparse.Namespace) -> int:
    from kb.records import KbValidationError
    from training.loop import TrainError
    from training.msem import TrainConfig, train_msem
    from training.pairs import PairFileError

    if not args.kb and not args.pairs:
        print("error: give --kb and/or --pairs", file=sys.stderr)
        return 2
    if args.resume and args.init:
        print("error: --resume continues a run; --init starts one (give one of them)", file=sys.stderr)
        return 2
    if args.from_scratch and args.init:
        print("error: --from-scratch and --init exclude each other", file=sys.stderr)
        return 2
    init = args.init
    if init is None and not args.from_scratch and not args.resume:
        init, error = _default_init(args.config)
        if error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    cfg = TrainConfig(
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, lr_decay=args.lr_decay, sgd_lr=args.sgd_lr,
        patience=args.patience, seed=args.seed, max_minutes=args.max_minutes, hard_refresh_every=args.hard_refresh,
    )
    command = _command_line()
    device, cache_dir = _model_settings(args.device)
    baseline = args.baseline
    if baseline is None:
        from app.settings import get_settings
        from app.match.assembly import default_encoder

        baseline = default_encoder(get_settings())
    baseline = None if baseline == "none" else baseline
    try:
        grid = [] if args.fusion_grid == "none" else [float(w) for w in args.fusion_grid.split(",") if w.strip()]
    except ValueError:
        grid = [-1.0]
    if any(not 0 < w < 1 for w in grid):
        print(f"error: --fusion-grid: expected weights in (0, 1) separated by commas, or 'none', got "
              f"{args.fusion_grid!r}", file=sys.stderr)
        return 2
    try:
        summary = train_msem(
            args.kb, args.out, pairs_path=args.pairs, dev_path=args.dev, dev_kb_path=args.dev_kb, init_dir=init,
            config_overrides=args.config, train_config=cfg, resume=args.resume, device=device, command=command,
            baseline=baseline, fusion_grid=grid, cache_dir=cache_dir,
        )
    except (TrainError, KbValidationError, PairFileError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if summary.get("trained", True):
        print(f"{summary['stop_reason']}: best {summary['metric']} = {summary['best_metric']} at epoch "
              f"{summary['best_epoch']}; model saved in {args.out}")
    if summary.get("fusion"):
        f = summary["fusion"]
        print(f"fusion weight {f['chosen_w']:g} (trained with {f['trained_w']:g}; top-1 on {f['queries']} by w: "
              f"{', '.join(f'{w} {v:.4f}' for w, v in f['top1_by_w'].items())})"
              + (f"; {f['reason']}" if f.get("reason") else ""))
    selection = summary.get("selection")
    if selection:
        if selection["kept"] == "fine-tuned":
            print(f"kept the fine-tuned model ({selection['reason']}): FAQ_ENCODER={args.out}")
        else:
            print(f"kept the zero-shot base, not the fine-tuned model ({selection['reason']}): "
                  f"FAQ_ENCODER={selection['encoder']}"
                  + (f"; to serve the fine-tuned model anyway: FAQ_ENCODER={args.out} or `faq index build "
                     f"--encoder {args.out}`" if summary.get("trained", True) else ""))
    return 0


def _register_reranker(tr_sub: argparse._SubParsersAction) -> None:
    p = tr_sub.add_parser(
        "reranker",
        help="train the cross-encoder re-ranker (phase A paraphrase pairs -> phase B STS-B regression)",
        description="Sequential transfer (training/cross_encoder/): binary equivalence on --pairs / --kb pairs "
        "with hard negatives, then STS-B regression; calibrated on held-out pairs; saved as a folder (+ ONNX int8) "
        "for FAQ_RERANKER=<folder>. Checkpoints every --checkpoint-every steps; Ctrl-C saves one; --resume continues.",
    )
    p.add_argument("--out", required=True, help="output folder (config.json, weights, tokenizer, ONNX, training.json)")
    p.add_argument("--kb", action="append", default=[], help="intent KB (JSONL/CSV): variants of one faq_id are "
                   "paraphrases, MiniLM nearest other-FAQ variants are hard negatives; repeatable")
    p.add_argument("--pairs", action="append", default=[], help="labelled pairs TSV label<TAB>q1<TAB>q2 (qqp_bimpm "
                   "dev.tsv, MRPC train; never MRPC test); repeatable")
    p.add_argument("--stsb", required=True, help="STS-B folder with the raw sts-train.csv and sts-dev.csv")
    p.add_argument("--base", choices=("minilm", "mpnet"), default="minilm",
                   help="pretrained body: minilm (all-MiniLM-L6-v2, fast) or mpnet (all-mpnet-base-v2, accurate, "
                        "about 10x the cost per pair)")
    p.add_argument("--layers", type=int, help="first N layers of the base (default 4 of MiniLM's 6, all 12 of mpnet's)")
    p.add_argument("--max-len", type=int, default=64, help="pair length in wordpieces (default 64)")
    p.add_argument("--epochs-a", type=int, default=2, help="phase A epochs (default 2)")
    p.add_argument("--epochs-b", type=int, default=3, help="phase B epochs (default 3)")
    p.add_argument("--anchors-per-faq", type=int, default=40, help="KB variants sampled per FAQ (default 40)")
    p.add_argument("--no-augment", action="store_true", help="no rule-based minimal-edit pairs in phase A")
    p.add_argument("--augment-max", type=int, default=16000, help="rule-based minimal-edit pairs at most (default 16000)")
    p.add_argument("--fusion-weight", type=float, default=0.3,
                   help="the folder's served cross-encoder weight in its pool with the first stage (default 0.3, "
                        "tuned on dev; FAQ_RERANK_WEIGHT overrides it; 1 = the cross-encoder alone)")
    p.add_argument("--holdout-fraction", type=float, default=0.2, help="share of every pair file and of the KB anchors "
                   "held out for calibration / the QQP threshold (default 0.2)")
    p.add_argument("--paper-head", action="store_true", help="the paper's recipe: phase B turns the one head into the "
                   "regression head (default: a separate STS head + phase A rehearsal in phase B)")
    p.add_argument("--batch-a", type=int, default=32, help="phase A batch (default 32)")
    p.add_argument("--batch-b", type=int, default=16, help="phase B batch (default 16)")
    p.add_argument("--lr-a", type=float, default=7e-5, help="phase A peak learning rate (default 7e-5, for MiniLM; "
                   "mpnet wants about 2e-5)")
    p.add_argument("--lr-b", type=float, default=4e-5, help="phase B peak learning rate (default 4e-5)")
    p.add_argument("--frozen-layers", type=int, default=0, help="keep the embeddings and the first N layers as "
                   "pretrained (cheaper steps; default 0)")
    p.add_argument("--rehearse-batch", type=int, help="phase A pairs per rehearsal batch in phase B (default: the "
                   "phase B batch, 16)")
    p.add_argument("--max-minutes", type=float, help="wall-clock budget for the whole run (phase A is planned to fit)")
    p.add_argument("--stop-after-minutes", type=float, help="stop this invocation after N minutes with a checkpoint "
                   "(exit code 3) without shortening the plan; --resume continues: splits a long run into chunks")
    p.add_argument("--checkpoint-every", type=int, default=200, help="steps between checkpoints (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt with the same data")
    p.add_argument("--device", help="cuda | cpu (default: cuda when available)")
    p.add_argument("--export-only", action="store_true", help="only (re-)export --out's weights to ONNX (fp32 + int8)")
    p.set_defaults(func=cmd_reranker)


def cmd_reranker(args: argparse.Namespace) -> int:
    import logging

    from app.settings import get_settings
    from models.matchers.cross_encoder import RerankerError, export_onnx
    from training.cross_encoder import RerankTrainConfig, train_reranker
    from training.loop import TrainError, TrainingPaused

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.export_only:
        try:
            for path in export_onnx(args.out):
                print(f"wrote {path}")
        except RerankerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    from models.matchers.cross_encoder import BASES

    top = BASES[args.base]["layers"]
    layers = args.layers if args.layers is not None else (4 if args.base == "minilm" else top)
    if not 1 <= layers <= top:
        print(f"error: --layers must be 1..{top} ({BASES[args.base]['name']} has {top})", file=sys.stderr)
        return 2
    for name in ("max_minutes", "stop_after_minutes", "rehearse_batch", "batch_a", "batch_b", "lr_a", "lr_b"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            print(f"error: --{name.replace('_', '-')} must be > 0", file=sys.stderr)
            return 2
    if not 0 <= args.holdout_fraction < 1:
        print("error: --holdout-fraction must be in [0, 1)", file=sys.stderr)
        return 2
    cfg = RerankTrainConfig(
        base=args.base, n_layers=layers, batch_a=args.batch_a, batch_b=args.batch_b, lr_a=args.lr_a, lr_b=args.lr_b, max_len=args.max_len, epochs_a=args.epochs_a, epochs_b=args.epochs_b,
        anchors_per_faq=args.anchors_per_faq, augment=not args.no_augment, augment_max=args.augment_max,
        fusion_weight=args.fusion_weight, max_minutes=args.max_minutes,
        checkpoint_every=args.checkpoint_every, seed=args.seed, holdout_fraction=args.holdout_fraction,
        sts_head=not args.paper_head, rehearse_batch=args.rehearse_batch, frozen_layers=args.frozen_layers, stop_after_minutes=args.stop_after_minutes,
    )
    command = _command_line()
    settings = get_settings()
    # FAQ_TORCH_THREADS when set (its default of 2 is the service's); else the trainer's own 1 on a CPU
    if "torch_threads" in settings.model_fields_set:
        cfg.threads = settings.torch_threads
    device, cache_dir = _model_settings(args.device)
    try:
        summary = train_reranker(args.out, args.kb, args.pairs, args.stsb, cfg, resume=args.resume,
                                 device=device, command=command, cache_dir=cache_dir)
    except TrainingPaused as exc:
        print(f"paused: {exc}; continue with the same command and --resume", file=sys.stderr)
        return 3
    except (TrainError, RerankerError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"STS-B dev Pearson {summary['stsb_dev_pearson']:.4f} / Spearman {summary['stsb_dev_spearman']:.4f}; "
          f"re-ranker saved in {args.out} (FAQ_RERANKER={args.out})")
    return 0


def _register_mmaicm(tr_sub: argparse._SubParsersAction) -> None:
    p = tr_sub.add_parser(
        "mmaicm",
        help="train MMAICM, the attentive interactive convolutional matcher of question-answer pairs",
        description="Pairwise hinge loss over (question, correct answer, wrong answer) triples from an answer "
        "selection set (--data/--src) and/or a KB (--kb: a phrasing's FAQ answer against other FAQs' answers). "
        "The best epoch by dev MAP is saved as a model folder in --out with a logistic calibration fitted on dev "
        "(models/matchers/mmaicm.py load_mmaicm). A checkpoint is written every epoch: --resume continues a cut run.",
    )
    p.add_argument("--out", required=True, help="output folder (config.json, model.safetensors, text.json, "
                   "calibration.json, training.json, checkpoint.pt)")
    p.add_argument("--data", choices=("wikiqa", "trecqa"), help="answer selection set: its train split trains, "
                   "its dev split selects the epoch")
    p.add_argument("--src", help="the --data folder (WikiQA-*.txt or train/dev/test.csv)")
    p.add_argument("--kb", help="KB file (JSONL/CSV): positives = (phrasing, its FAQ's answer), negatives = other "
                   "FAQs' answers; 10%% of the phrasings are held out as dev")
    p.add_argument("--word-repr", choices=("glove", "minilm"), help="word vectors: glove (GloVe 6B-50d, default) or "
                   "minilm (all-MiniLM-L6-v2's frozen token states)")
    p.add_argument("--matcher", choices=("cnn", "knrm"), help="cnn (MMAICM, default) or knrm (the K-NRM baseline)")
    p.add_argument("--no-attention", action="store_true", help="the MMAICM-NoAttention ablation: the raw "
                   "interaction matrix goes to the CNN")
    p.add_argument("--config", help="MmaicmConfig overrides: a JSON object or a JSON file (e.g. '{\"filters\": 32}')")
    p.add_argument("--epochs", type=int, default=30, help="maximum epochs (default 30)")
    p.add_argument("--batch-size", type=int, default=64, help="triples per step (default 64)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    p.add_argument("--negatives", type=int, default=4, help="negatives per correct answer per epoch (default 4)")
    p.add_argument("--random-negatives", type=float, default=0.2, help="share of negatives drawn from other "
                   "questions instead of the question's own wrong candidates (default 0.2)")
    p.add_argument("--patience", type=int, default=5, help="stop after this many epochs without a better dev MAP")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-minutes", type=float, help="wall-clock budget for the whole run; the running epoch is cut")
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt with the same data")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    p.add_argument("--device", help="cuda | cpu (default: cuda when available)")
    p.set_defaults(func=cmd_mmaicm)


def cmd_mmaicm(args: argparse.Namespace) -> int:
    import json

    from kb.records import KbValidationError
    from training.loop import TrainError
    from training.mmaicm import TrainConfig, parse_config_overrides, train_mmaicm

    if not args.data and not args.kb:
        print("error: give --data (with --src) and/or --kb", file=sys.stderr)
        return 2
    if args.data and not args.src:
        print(f"error: --data {args.data} needs --src (the {args.data} folder)", file=sys.stderr)
        return 2
    if not _set_threads(args.threads):
        return 2
    try:
        overrides = parse_config_overrides(args.config)
        flags = {"word_repr": args.word_repr, "matcher": args.matcher, "use_attention": False if args.no_attention else None}
        for key, value in flags.items():
            if value is not None:
                if key in overrides and overrides[key] != value:
                    raise TrainError(f"--config sets {key}={json.dumps(overrides[key])} but a flag asks for {value!r}")
                overrides[key] = value
        cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, negatives=args.negatives,
                          random_negative_share=args.random_negatives, patience=args.patience, seed=args.seed,
                          max_minutes=args.max_minutes)
        command = _command_line()
        device, cache_dir = _model_settings(args.device)
        summary = train_mmaicm(args.out, data=args.data, src=args.src, kb=args.kb, config_overrides=overrides,
                               train_config=cfg, resume=args.resume, device=device, command=command,
                               cache_dir=cache_dir)
    except (TrainError, KbValidationError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    best = summary["best_metric"]
    print(f"{summary['stop_reason']}: best {summary['metric']} = {'-' if best is None else f'{best:.4f}'} at epoch "
          f"{summary['best_epoch']}; model saved in {args.out}")
    return 0


def _register_analogy(tr_sub: argparse._SubParsersAction) -> None:
    p = tr_sub.add_parser(
        "analogy",
        help="train analogy-preserving sentence embeddings (or the BiGRU-cosine baseline) for answer selection",
        description="A BiGRU sentence encoder trained on quadruples (two QA pairs of one question type, label 1 "
        "when both answers are correct) with the contrastive loss on E = cos(f(q_p) - f(a_p), f(q) - f(a)); a "
        "candidate is scored by its best of the k prototypes of the question's type (models/matchers/analogy.py). The "
        "best epoch by dev MAP is saved in --out; a checkpoint every epoch: --resume continues a cut run, a "
        "re-run without it starts over.",
    )
    p.add_argument("--qa", required=True, help="wikiqa:DIR | trecqa:DIR (who / when / where questions of the train "
                   "split train, of the dev split select) | kb:FILE (10%% of the phrasings held out as dev)")
    p.add_argument("--prototypes", type=int, default=30, help="prototype QA pairs per question type (default 30)")
    p.add_argument("--out", required=True, help="output folder (config.json, model.safetensors, text.json, "
                   "prototypes.json, training.json, checkpoint.pt)")
    p.add_argument("--words", choices=("glove", "minilm"), default="glove",
                   help="word vectors: glove (GloVe 6B-50d, default) or minilm (all-MiniLM-L6-v2's frozen token states)")
    p.add_argument("--objective", choices=("analogy", "cosine"), default="analogy",
                   help="analogy (default) or cosine (the paper's BiGRU-cosine baseline: cos(f(q), f(a)))")
    p.add_argument("--margin", type=float, default=0.0, help="m of the loss (the paper does not give it; default 0)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64, help="quadruples per step (default 64)")
    p.add_argument("--weight-decay", type=float, default=0.01, help="Adam's L2 weight decay (paper: 0.01)")
    p.add_argument("--per-answer", type=int, default=8, help="prototypes per correct answer per epoch (default 8)")
    p.add_argument("--patience", type=int, default=5, help="stop after this many epochs without a better dev MAP")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-minutes", type=float, help="wall-clock budget for the whole run; the running epoch is cut")
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt (its model and prototypes)")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    p.add_argument("--device", help="cuda | cpu (default: cuda when available)")
    p.set_defaults(func=cmd_analogy)


def cmd_analogy(args: argparse.Namespace) -> int:
    from kb.records import KbValidationError
    from models.matchers.analogy import AnalogyConfig
    from training.analogy import TrainConfig, train_analogy
    from training.loop import TrainError

    if not _set_threads(args.threads):
        return 2
    try:
        config = None if args.resume else AnalogyConfig(word_repr=args.words, objective=args.objective,
                                                        margin=args.margin)
        cfg = TrainConfig(prototypes=args.prototypes, epochs=args.epochs, batch_size=args.batch_size,
                          per_answer=args.per_answer, patience=args.patience, weight_decay=args.weight_decay, seed=args.seed,
                          max_minutes=args.max_minutes)
        command = _command_line()
        device, cache_dir = _model_settings(args.device)
        summary = train_analogy(args.out, args.qa, config, cfg, resume=args.resume, device=device,
                                command=command, cache_dir=cache_dir)
    except (TrainError, KbValidationError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    best = summary["best_dev_map"]
    print(f"{summary['stop_reason']}: best dev MAP = {'-' if best is None else f'{best:.4f}'} at epoch "
          f"{summary['best_epoch']}; model saved in {args.out}")
    return 0


def _register_siamese(tr_sub: argparse._SubParsersAction) -> None:
    p = tr_sub.add_parser(
        "siamese",
        help="train the Siamese short-text matcher (LSTM / Conv1D / Conv + LSTM / Conv + LSTM + BiLSTM encoder)",
        description="One shared encoder for both sentences, [u - v; u * v] into a two-hidden-layer ReLU MLP with "
        "batch normalisation and dropout, log loss (models/matchers/siamese.py). The epoch with the lowest --dev log loss "
        "is saved in --out and calibrated on --dev; a checkpoint every epoch: --resume continues a cut run.",
    )
    p.add_argument("--pairs", action="append", default=[], help="labelled pairs TSV label<TAB>q1<TAB>q2 "
                   "(faq data prepare qqp|mrpc); repeatable")
    p.add_argument("--kb", help="a KB file (JSONL/CSV): pairs from its phrasings, drawn afresh every epoch: a "
                   "positive, a random and a hard negative per phrasing (with or instead of --pairs)")
    p.add_argument("--dev", help="pairs TSV that picks the epoch and fits the calibration")
    p.add_argument("--dev-queries", help="instead of --dev: labelled queries (JSONL/CSV, query + faq_id, none for "
                   "out of scope) paired with --kb's phrasings the way a re-ranking stage sees them")
    p.add_argument("--negatives-encoder", default="minilm", help="encoder that finds the KB's hard negatives and "
                   "the dev queries' candidates (default minilm; any `--encoder` spec of faq index build)")
    p.add_argument("--out", required=True, help="output folder (config.json, model.safetensors, text.json, "
                   "calibration.json, train.json, checkpoint.pt); with several --encoder, one sub-folder each")
    p.add_argument("--encoder", action="append", choices=("lstm", "conv", "conv_lstm", "conv_lstm_bilstm"),
                   help="sentence encoder (default conv); repeatable: the variants are trained one after another "
                   "into --out/<encoder>, word vectors computed once")
    p.add_argument("--word-cache", metavar="FILE", help="keep every text's word vectors in FILE (fp16) and reuse "
                   "them in later runs over the same texts and --words: MiniLM's states are most of a short run")
    p.add_argument("--words", choices=("glove", "minilm"), default="glove",
                   help="word vectors: glove (GloVe 6B-50d, default) or minilm (all-MiniLM-L6-v2's frozen token states)")
    p.add_argument("--config", help='other SiameseConfig fields as JSON, e.g. \'{"filters": 128, "dropout": 0.2}\'')
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--patience", type=int, default=4, help="stop after this many epochs without a better dev log loss")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-minutes", type=float, help="wall-clock budget; the running epoch is cut, the best kept")
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    p.add_argument("--device", help="cuda | cpu (default: cpu)")
    p.set_defaults(func=cmd_siamese)


def _read_word_cache(path: str | None, words: str, max_len: int) -> dict:
    """`--word-cache`: text -> word vectors saved by an earlier run with the same word representation."""
    if not path or not Path(path).is_file():
        return {}
    import torch

    saved = torch.load(path, weights_only=True)
    if (saved.get("words"), saved.get("max_len")) != (words, max_len):
        raise ValueError(f"--word-cache {path} holds {saved.get('words')} vectors of at most {saved.get('max_len')} "
                         f"tokens, not {words} of {max_len}")
    return {text: s.float() for text, s in saved["states"].items()}


def _write_word_cache(path: str | None, words: str, max_len: int, states: dict) -> None:
    import os

    import torch

    if path and states:
        tmp = f"{path}.tmp"
        torch.save({"words": words, "max_len": max_len, "states": {t: s.half() for t, s in states.items()}}, tmp)
        os.replace(tmp, path)


def cmd_siamese(args: argparse.Namespace) -> int:
    from kb.records import KbValidationError
    from models.matchers.siamese import SiameseConfig
    from training.loop import TrainError
    from training.pairs import PairFileError
    from training.siamese import TrainConfig, parse_overrides, train_siamese

    encoders = list(dict.fromkeys(args.encoder or ["conv"]))
    words = negatives = None
    device, cache_dir = _model_settings(args.device)
    try:
        cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, patience=args.patience,
                          seed=args.seed, max_minutes=args.max_minutes, threads=args.threads)
        configs = [SiameseConfig(**{"encoder": e, "word_repr": args.words, **parse_overrides(args.config)})
                   for e in encoders]
        if len({c.max_len for c in configs}) > 1:
            raise ValueError("the variants of one run share word vectors: give them one max_len")
        states = _read_word_cache(args.word_cache, args.words, configs[0].max_len)  # text -> word vectors
        cached = len(states)
        if args.kb:
            from models.encoders.load import load_encoder

            negatives = load_encoder(args.negatives_encoder, device=device, threads=args.threads, cache_dir=cache_dir)
        for config in configs:
            out = Path(args.out) / config.encoder if len(configs) > 1 else Path(args.out)
            if words is None:
                from models.encoders.words import make_words

                words = make_words(config.word_repr, device=device or "cpu", cache_dir=cache_dir)
            summary = train_siamese(out, args.pairs, args.dev, config, cfg, resume=args.resume, words=words,
                                    device=device, kb=args.kb, dev_queries=args.dev_queries,
                                    negatives_encoder=negatives, states=states, cache_dir=cache_dir)
            print(f"{config.encoder}: {summary['stopped']}: best dev log loss {summary['best_dev_log_loss']:.4f} at "
                  f"epoch {summary['best_epoch']} of {len(summary['history'])}; model saved in {out}")
            if len(states) > cached:
                _write_word_cache(args.word_cache, args.words, config.max_len, states)
                cached = len(states)
    except (TrainError, PairFileError, KbValidationError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _register_query_encoder(tr_sub: argparse._SubParsersAction) -> None:
    p = tr_sub.add_parser(
        "query-encoder",
        help="fit a fast query encoder into the accurate encoder's space (FAQ side mpnet, queries MiniLM)",
        description="The teacher (--teacher, the encoder that builds the index) and the base (--base) encode a "
        "corpus of question-like sentences (--data: ../shared/data's datasets, train splits only; --kb: KB "
        "files' phrasings and answers); the vectors are cached in chunks under --work, so a cut run resumes. "
        "The base's vectors are then mapped into the teacher's space by a ridge least-squares fit "
        "(models/encoders/query.py); the folder in --out is an encoder spec for queries.",
    )
    p.add_argument("--out", required=True, help="output folder (config.json, projection.safetensors, training.json)")
    p.add_argument("--data", help="folder of the public datasets (e.g. ../shared/data); missing ones are skipped")
    p.add_argument("--kb", action="append", default=[], help="KB file whose phrasings and answers join the corpus "
                   "(repeatable)")
    p.add_argument("--work", default="var/query-encoder", help="where the teacher's and base's vectors are cached")
    p.add_argument("--teacher", default="mpnet", help="the FAQ side's encoder (default mpnet)")
    p.add_argument("--base", default="minilm", help="the fast encoder run per query (default minilm)")
    p.add_argument("--ridge", type=float, default=1.0, help="ridge penalty of the least-squares fit")
    p.add_argument("--train-layers", type=int, default=0, help="then fine-tune the base's top N layers and the "
                   "projection (0: the fit alone)")
    p.add_argument("--epochs", type=int, default=None, help="fine-tuning epochs (default 3; with --from 10); the "
                   "best epoch is kept: by --dev top-1 when given, else by held-out corpus agreement")
    p.add_argument("--patience", type=int, default=None, help="epochs without improvement before stopping "
                   "(default 1; with --from 3)")
    p.add_argument("--lr", type=float, default=None, help="learning rate of the base's layers (default 5e-5)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epoch-sentences", type=int, default=None, help="an epoch is this many sentences drawn "
                   "afresh (default: the whole corpus), so the best point is picked more often")
    p.add_argument("--dev", action="append", default=[], help="a KB's dev queries (JSONL/CSV, users' wording; "
                   "repeatable, paired with the --kb file in the same folder): the fine-tuning keeps the epoch that "
                   "ranks them best, and the starting point counts as an epoch")
    p.add_argument("--from", dest="init_from", help="refine this query encoder on the --kb files' phrasings and "
                   "answers alone (needs --dev: kept only if it ranks the dev queries better)")
    p.add_argument("--typos", type=float, default=0.0, help="share of training sentences given one user-like slip "
                   "each time they are drawn, still aimed at the clean text's teacher vector (default 0)")
    p.add_argument("--write-teacher-pack", help="also write the corpus and the teacher's vectors (the --dev KBs' "
                   "texts included) to this file, for a fine-tuning on a machine without the teacher")
    p.add_argument("--teacher-pack", help="train from such a file instead of --data/--kb's corpus; the teacher is "
                   "never loaded")
    p.add_argument("--max-minutes", type=float, help="time budget of the fine-tuning")
    p.add_argument("--stop-after-minutes", type=float, help="pause the fine-tuning after this long (--resume goes on)")
    p.add_argument("--resume", action="store_true", help="continue a paused or cut fine-tuning from --out")
    p.add_argument("--runtime", default="auto", choices=["auto", "onnx-int8", "onnx", "torch"],
                   help="runtime of both encoders while encoding the corpus (auto: what builds use)")
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default FAQ_DEVICE, else CUDA when present)")
    p.set_defaults(func=cmd_query_encoder)


def cmd_query_encoder(args: argparse.Namespace) -> int:
    import logging

    from kb.records import KbValidationError
    from training.loop import TrainError, TrainingPaused
    from training.query_encoder import QueryEncoderConfig, train_query_encoder

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    device, cache_dir = _model_settings(args.device)
    refine = args.init_from is not None
    tuning = {k: v for k, v in (("epochs", args.epochs if args.epochs is not None else (10 if refine else None)),
                                ("patience", args.patience if args.patience is not None else (3 if refine else None)),
                                ("lr", args.lr)) if v is not None}
    try:
        report = train_query_encoder(args.out, data_dir=args.data, kb_files=args.kb, work=args.work,
                                     config=QueryEncoderConfig(
                                         teacher=args.teacher, base=args.base, ridge=args.ridge,
                                         train_layers=args.train_layers, batch_size=args.batch_size,
                                         max_minutes=args.max_minutes, stop_after_minutes=args.stop_after_minutes,
                                         epoch_sentences=args.epoch_sentences, typos=args.typos, **tuning),
                                     runtime=args.runtime, device=device, cache_dir=cache_dir, threads=args.threads,
                                     resume=args.resume, dev_files=args.dev, init_from=args.init_from,
                                     teacher_pack=args.teacher_pack, write_teacher_pack=args.write_teacher_pack)
    except TrainingPaused as exc:
        print(f"paused: {exc}; continue with the same command and --resume", file=sys.stderr)
        return 0
    except (TrainError, KbValidationError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tuned = report.get("fine_tune") or {}
    if "dev_top1_start" in tuned:
        start = tuned["dev_top1_start"]
        print(f"dev top-1: {'?' if start is None else f'{start:.3f}'} at the start, best {tuned['best_metric']:.3f}; "
              f"{args.out} holds the {tuned['kept']}", file=sys.stderr)
    if refine:
        return 0
    held = report["held_out_mapped"]
    print(f"query encoder saved in {args.out}: {report['sentences']} sentences; held out, mean cosine to the teacher "
          f"{held['mean_cosine']:.3f}, nearest-neighbour agreement {held['nearest_agreement']:.3f} "
          f"(the base in its own space: {report['held_out_base_as_is']['nearest_agreement']:.3f})")
    return 0


def _register_decision(tr_sub: argparse._SubParsersAction) -> None:
    # the options are `faq eval decision train`'s (training/decision.py `add_train_options`), written
    # out here so that building the parser imports no trainer
    p = tr_sub.add_parser(
        "decision",
        help="train the cross-KB decision model (index/decision_model.json)",
        description="Fits the decision model on the candidates `faq eval decision collect` cached per "
        "KB and encoder, and writes it (the model that ships: index/decision_model.json).",
    )
    from training.decision import add_data_options

    add_data_options(p)
    p.add_argument("--out", default=None, help="default: index/decision_model.json")
    p.set_defaults(func=cmd_decision)


def cmd_decision(args: argparse.Namespace) -> int:
    from training.decision import train_decision

    return train_decision(args, "faq " + " ".join(sys.argv[1:]))
