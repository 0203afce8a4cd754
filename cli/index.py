"""`faq index ...`: build, list, activate (rollback) and verify index versions.

    faq index build [--encoder SPEC] [--n-trees N] [--search-k K] [--batch-size B]
    faq index list
    faq index activate VERSION
    faq index verify [VERSION]
    faq index sweep [--dry-run]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from index.artifacts import BuildRegistry, IndexVerificationError, UnknownVersion


def register(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser("index", help="build and manage vector index versions")
    sub = group.add_subparsers(dest="index_command", metavar="SUBCOMMAND")

    p = sub.add_parser(
        "build", help="encode the KB, build + verify a new Annoy index version and make it current",
        description="Reads every question variant from the store, encodes them, builds an Annoy (angular) "
        "index in a staging folder, verifies it (checksum, self-recall@10 vs exact search) and switches "
        "`current` atomically. A failed or interrupted build leaves `current` unchanged. The lexical arms' "
        "BM25 index is built under the same version: tantivy in the build folder, and the Elasticsearch "
        "index <FAQ_ES_INDEX_PREFIX>-<version> when FAQ_ES_URL is set.",
    )
    p.add_argument("--encoder", default=None, help="'minilm', 'msem' or an MSEM model folder (default: FAQ_ENCODER, else minilm)")
    p.add_argument("--n-trees", type=int, default=None, help="Annoy trees (default: settings.ann_n_trees)")
    p.add_argument("--search-k", type=int, default=None,
                   help="nodes inspected per query, -1 = Annoy default n_trees*k (default: settings.ann_search_k)")
    p.add_argument("--batch-size", type=int, default=64, help="encoder batch size (default 64)")
    p.add_argument("--recall-floor", type=float, default=0.9, help="minimum self-recall@10 for the build to pass")
    p.add_argument("--no-activate", action="store_true", help="build and verify but leave `current` as it is")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-lexical", action="store_true",
                   help="skip the BM25 indexes of the lexical arms (tantivy, and Elasticsearch at FAQ_ES_URL)")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("list", help="list index versions (current marked)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("activate", help="make VERSION current (rollback); verifies its checksum first")
    p.add_argument("version")
    p.set_defaults(func=cmd_activate)

    p = sub.add_parser("verify", help="verify a version: files, checksum, counts, self-recall@10")
    p.add_argument("version", nargs="?", default=None, help="default: the current version")
    p.add_argument("--recall-floor", type=float, default=None, help="fail when self-recall@10 is below this")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "sweep", help="mark builds whose process died failed and remove their staging folders",
        description="Finds builds left behind by a killed `faq index build` (SIGKILL, OOM killer, a lost "
        "machine): their index_builds rows are still 'building' and their staging folders are on disk. "
        "A build whose process still holds its lock file is never touched, so this is safe next to running "
        "builds and servers. A build without a lock file counts as orphaned when its staging folder is "
        "older than 24 h, or when it has none and started more than 15 minutes ago. `faq index build` "
        "and the service's start-up run the same sweep.",
    )
    p.add_argument("--dry-run", action="store_true", help="only say what would be cleaned up")
    p.set_defaults(func=cmd_sweep)

    group.set_defaults(func=lambda args: (group.print_help(), 2)[1])


def _registry(settings) -> BuildRegistry:
    return BuildRegistry(settings.index_dir)


def _error(msg: str, code: int = 1) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def _warn_if_not_selected(spec: str) -> None:
    """A fine-tuned folder whose selection kept the base: built as asked, but said out loud."""
    from models.train_msem import read_selection

    selection = read_selection(spec) if Path(spec).is_dir() else None
    if selection and selection.get("kept") == "base":
        print(f"warning: {spec} measured no better than the zero-shot {selection['baseline']} when it was trained "
              f"({selection['reason']}); building with it as asked (--encoder {selection['baseline']} for the base)",
              file=sys.stderr)


def cmd_build(args: argparse.Namespace) -> int:
    from app.settings import get_settings
    from app.pipeline import encoder_spec, load_configured_encoder
    from migrations.runner import migrated_store
    from index.build import BuildError, BuildInterrupted, build_index, sweep_builds

    settings = get_settings()
    n_trees = args.n_trees if args.n_trees is not None else settings.ann_n_trees
    search_k = args.search_k if args.search_k is not None else settings.ann_search_k

    import torch

    torch.set_num_threads(max(1, int(settings.torch_threads)))
    store = migrated_store(settings)
    registry = _registry(settings)
    try:
        swept = sweep_builds(store, registry)
    except Exception as exc:  # debris of other builds must not stop this one
        print(f"warning: could not sweep orphaned builds: {exc}", file=sys.stderr)
    else:
        if swept.failed or swept.removed:
            print(f"cleaned up after killed builds: {swept.summary()}")
    spec = args.encoder or encoder_spec(settings)
    if Path(spec).exists():  # a model folder: record an absolute path so any working directory can load it
        spec = str(Path(spec).resolve())
    _warn_if_not_selected(spec)
    encoder = load_configured_encoder(settings, spec=spec)
    print(f"encoder {encoder.id} (dim {encoder.dim}) on {getattr(encoder, 'device', 'cpu')}, runtime "
          f"{getattr(encoder, 'runtime', 'torch')}; "
          f"n_trees={n_trees} search_k={search_k}")
    try:
        from app.pipeline import vector_stages

        stages = vector_stages(settings)  # FAQ_RERANKER's Siamese matchers: their phrasing vectors go in the build
    except (OSError, ValueError) as exc:
        return _error(f"FAQ_RERANKER: {exc} (current index unchanged)")
    try:
        manifest = build_index(
            store, encoder, registry, n_trees=n_trees, search_k=search_k, batch_size=args.batch_size,
            progress=not args.no_progress and sys.stderr.isatty(), keep_versions=settings.keep_versions,
            recall_floor=args.recall_floor, activate=not args.no_activate, report=print, encoder_spec=spec,
            lexical=not args.no_lexical, es_url=settings.es_url, es_index_prefix=settings.es_index_prefix,
            stage_vectors=stages,
        )
    except (BuildError, IndexVerificationError) as exc:
        return _error(f"{exc} (current index unchanged)")
    except BuildInterrupted as exc:
        return _error(f"build {exc}: marked failed, staging folder removed, current index unchanged", exc.exit_code)
    t = manifest["timings"]
    print(f"built {manifest['version']}: {manifest['n_variants']} variants of {manifest['n_faqs']} FAQs, "
          f"{manifest['annoy_bytes'] / 1e6:.1f} MB; encode {t['encode_s']:.1f}s "
          f"({t['encode_sentences_per_s']:.0f} sentences/s), annoy {t['annoy_build_s']:.2f}s, "
          f"verify {t['verify_s']:.2f}s, total {t['total_s']:.1f}s"
          + ("" if args.no_activate else "; now current"))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from app.settings import get_settings

    manifests = _registry(get_settings()).list()
    if not manifests:
        print("no index versions yet: run `faq index build`")
        return 0
    header = f"  {'VERSION':<24} {'FAQS':>7} {'VARIANTS':>9} {'TREES':>5} {'SEARCH_K':>8} {'RECALL@10':>9}  {'ENCODER':<24} CREATED"
    print(header)
    for m in manifests:
        recall = (m.get("verify") or {}).get("self_recall_at_10")
        print(f"{'*' if m['current'] else ' '} {m['version']:<24} {m['n_faqs']:>7} {m['n_variants']:>9} "
              f"{m['n_trees']:>5} {m['search_k']:>8} {'' if recall is None else f'{recall:.4f}':>9}  "
              f"{m['encoder_id']:<24} {m['created_at']}")
    current = next((m for m in manifests if m["current"]), None)
    if current is not None:
        print()
        print(expected_precision_text(current, get_settings()))
    return 0


def expected_precision_text(manifest: dict, settings) -> str:
    """The build's threshold -> expected precision / answer rate table as served with `settings`."""
    from index.answers import nearest_weight
    from index.decision import served_table, threshold_for_precision

    used = (manifest.get("answers") or {}).get("used") and settings.answer_weight > 0
    weight = nearest_weight(settings.answer_weight) if used else 0.0
    pool = settings.pool_variants or (1 if used else 2)
    table = served_table(manifest, pool, weight, settings.oos_share)
    if table is None or settings.scoring != "model":
        return f"{manifest['version']}: no expected-precision table (scoring by the build's cosine curve)"
    chosen = settings.default_threshold
    if settings.target_precision is not None:
        chosen = threshold_for_precision(table, settings.target_precision) or 1.0
    lines = [f"{manifest['version']}: expected precision and answer rate by threshold "
             f"({settings.oos_share:.0%} of questions assumed out of scope; * = the threshold served)",
             f"  {'THRESHOLD':>9} {'PRECISION':>9} {'ANSWERED':>8}"]
    for row in table:
        ep = "-" if row["expected_precision"] is None else f"{row['expected_precision']:.3f}"
        mark = "*" if abs(row["threshold"] - chosen) < 1e-9 else " "
        lines.append(f"{mark} {row['threshold']:>9.2f} {ep:>9} {row['answer_rate']:>8.3f}")
    return "\n".join(lines)


def cmd_activate(args: argparse.Namespace) -> int:
    from app.settings import get_settings

    registry = _registry(get_settings())
    try:
        registry.activate(args.version)
    except (UnknownVersion, IndexVerificationError) as exc:
        return _error(str(exc))
    print(f"current -> {args.version}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from app.settings import get_settings

    registry = _registry(get_settings())
    version = args.version or registry.current()
    if version is None:
        return _error("no current index version: run `faq index build` or name a VERSION")
    try:
        report = registry.verify(version, recall=True, recall_floor=args.recall_floor)
    except UnknownVersion as exc:
        return _error(str(exc))
    recall = "" if report.self_recall_at_10 is None else f", self-recall@10 {report.self_recall_at_10:.4f}"
    if report.ok:
        print(f"{version}: OK ({report.n_items} items, checksum ok{recall})")
        return 0
    print(f"{version}: FAILED: " + "; ".join(report.errors), file=sys.stderr)
    return 1


def cmd_sweep(args: argparse.Namespace) -> int:
    from app.settings import get_settings
    from index.build import sweep_builds
    from migrations.runner import migrated_store

    settings = get_settings()
    if args.dry_run:  # not even a migration: a dry run changes nothing
        from app.store import FaqStore, SchemaNotReady

        try:
            store = FaqStore.from_settings(settings)
        except SchemaNotReady as exc:
            return _error(str(exc))
    else:
        store = migrated_store(settings)
    try:
        report = sweep_builds(store, _registry(settings), dry_run=args.dry_run)
    finally:
        store.close()
    print(("dry run: would have " if args.dry_run else "") + report.summary())
    for version in sorted(set(report.failed) | set(report.removed)):
        print(f"  {version}: " + ", ".join(
            ([] if version not in report.failed else ["row marked failed"])
            + ([] if version not in report.removed else ["staging folder removed"])))
    return 0
