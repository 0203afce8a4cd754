"""`faq index ...`: build, list, activate (rollback) and verify index versions of one KB (--kb NAME, else
FAQ_KB: cli/scope.py); each KB has its own versions under its folder (settings `index_dir`).

    faq index build [--kb NAME] [--encoder SPEC] [--n-trees N] [--search-k K] [--batch-size B]
    faq index list [--kb NAME]
    faq index activate VERSION [--kb NAME]
    faq index verify [VERSION] [--kb NAME]
    faq index sweep [--kb NAME] [--dry-run]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from index.artifacts import BuildRegistry, IndexVerificationError, UnknownVersion
from kb.records import DEFAULT_KB
from cli.scope import add_kb_option, kb_settings, open_kb
from app.release.gate import MAX_DROP, MIN_LABELS
from app.release.expected_precision import CURVE_FILE, plot_expected_precision, served_table_for as _served_table


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
    p.add_argument("--encoder", default=None, help="'mpnet', 'minilm', 'multilingual', 'msem' or an MSEM model folder (default: "
                   "FAQ_ENCODER, else mpnet when installed, else minilm)")
    p.add_argument("--query-encoder", default=None, help="balanced mode: a `faq train query-encoder` folder "
                   "encodes the queries, recorded so `faq serve` uses it (default: FAQ_QUERY_ENCODER)")
    p.add_argument("--n-trees", type=int, default=None, help="Annoy trees (default: settings.ann_n_trees)")
    p.add_argument("--search-k", type=int, default=None,
                   help="nodes inspected per query, -1 = Annoy default n_trees*k (default: settings.ann_search_k)")
    p.add_argument("--batch-size", type=int, default=64, help="encoder batch size (default 64)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="encode on N Ray workers (pip install -e '.[distributed]'; docs/operations.md); 0: in this process")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --workers: an existing Ray cluster (e.g. ray://head:10001, or auto); default: a local one")
    p.add_argument("--threads-per-worker", type=int, default=1, metavar="T", help="with --workers: CPUs per worker")
    p.add_argument("--recall-floor", type=float, default=0.9, help="minimum self-recall@10 for the build to pass")
    p.add_argument("--no-activate", action="store_true", help="build and verify but leave `current` as it is")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-lexical", action="store_true",
                   help="skip the BM25 indexes of the lexical arms (tantivy, and Elasticsearch at FAQ_ES_URL)")
    p.add_argument("--dev", default=None, help="labelled user queries (JSONL/CSV: query, faq_id or null) that gate "
                   "the build, with the /feedback labels of the query log")
    p.add_argument("--max-drop", type=float, default=MAX_DROP,
                   help="refuse to make the build current when its top-1 on the labels is more than this below "
                        "the current build's (default 0.02)")
    p.add_argument("--min-labels", type=int, default=MIN_LABELS,
                   help=f"labels needed before they gate a build (default {MIN_LABELS})")
    p.add_argument("--force", action="store_true", help="make the build current even when the labels say it is worse")
    add_kb_option(p)
    p.set_defaults(func=cmd_build)

    p = sub.add_parser(
        "calibrate", help="refit the decision model on this KB's own labels (--dev FILE and /feedback)",
        description="Scores the labelled queries against the current build, refits the cross-KB decision "
        "model on them (pulled toward it with the weight of --strength labelled queries, so a few labels move "
        "it little) and writes decision_model.json in the KB's folder (<FAQ_DATA_DIR> for 'default', else "
        "<FAQ_DATA_DIR>/kbs/<kb>), which the service uses from its next start. "
        "Prints a 5-fold comparison of the two models on the labels. --reset removes it.",
    )
    p.add_argument("--dev", default=None, help="labelled queries (JSONL/CSV: query, faq_id or null)")
    p.add_argument("--since", default=None, help="only feedback logged from this date (YYYY-MM-DD)")
    p.add_argument("--no-feedback", action="store_true", help="ignore the query log's /feedback labels")
    p.add_argument("--strength", type=float, default=None,
                   help="the cross-KB model's weight in labelled queries (default index/decision.py PRIOR_STRENGTH)")
    p.add_argument("--dry-run", action="store_true", help="measure, write nothing")
    p.add_argument("--reset", action="store_true", help="remove this KB's model: serve the cross-KB one again")
    add_kb_option(p)
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("list", help="list index versions (current marked)")
    add_kb_option(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("activate", help="make VERSION current (rollback); verifies its checksum first")
    p.add_argument("version")
    add_kb_option(p)
    p.set_defaults(func=cmd_activate)

    p = sub.add_parser("verify", help="verify a version: files, checksum, counts, self-recall@10")
    p.add_argument("version", nargs="?", default=None, help="default: the current version")
    p.add_argument("--recall-floor", type=float, default=None, help="fail when self-recall@10 is below this")
    add_kb_option(p)
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
    add_kb_option(p)
    p.set_defaults(func=cmd_sweep)

    group.set_defaults(func=lambda args: (group.print_help(), 2)[1])


def _registry(settings, lexical: bool = True) -> BuildRegistry:
    """The KB's registry: with FAQ_VECTOR_STORE=elasticsearch, builds also write their vectors there and
    activation moves the KB's alias (index/elasticsearch/vectors.py); `lexical`: it owns the builds' BM25
    indexes in Elasticsearch too."""
    from index.elasticsearch.vectors import open_registry

    return open_registry(settings, lexical)


def _kb_flag(settings) -> str:
    """The --kb a suggested command needs to act on the same KB again ('' for the default one)."""
    return "" if settings.kb == DEFAULT_KB else f" --kb {settings.kb}"


def _error(msg: str, code: int = 1) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def _warn_if_not_selected(spec: str) -> None:
    """A fine-tuned folder whose selection kept the base: built as asked, but said out loud."""
    from training.msem import read_selection

    selection = read_selection(spec) if Path(spec).is_dir() else None
    if selection and selection.get("kept") == "base":
        print(f"warning: the selection kept the zero-shot {selection['baseline']}, not {spec}, when it was trained "
              f"({selection['reason']}); building with it as asked (--encoder {selection['baseline']} for the base)",
              file=sys.stderr)


def cmd_build(args: argparse.Namespace) -> int:
    with open_kb(args) as scope:
        return _build(args, scope.settings, scope.store)


def _build(args: argparse.Namespace, settings, store) -> int:
    from app.match.assembly import encoder_spec, load_configured_encoder
    from index.build import sweep_builds

    n_trees = args.n_trees if args.n_trees is not None else settings.ann_n_trees
    search_k = args.search_k if args.search_k is not None else settings.ann_search_k

    import torch

    torch.set_num_threads(max(1, int(settings.torch_threads)))
    registry = _registry(settings, lexical=not args.no_lexical)
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
    if args.workers < 0 or args.threads_per_worker < 1:
        return _error("--workers must be >= 0 and --threads-per-worker >= 1")
    if args.workers:
        from app.match.assembly import encoder_runtime
        from models.encoders.distributed import RayEncoder

        try:
            encoder = RayEncoder(spec, workers=args.workers, threads=args.threads_per_worker,
                                 runtime=encoder_runtime(settings), device=settings.device,
                                 cache_dir=settings.mpnet_cache, address=args.ray_address)
        except (RuntimeError, ValueError, ConnectionError) as exc:
            return _error(f"--workers: {exc} (current index unchanged)")
        try:
            return _build_with(args, settings, store, registry, spec, encoder, n_trees, search_k)
        finally:
            encoder.close()
    encoder = load_configured_encoder(settings, spec=spec)
    return _build_with(args, settings, store, registry, spec, encoder, n_trees, search_k)


def _build_with(args: argparse.Namespace, settings, store, registry, spec: str, encoder, n_trees: int,
                search_k: int) -> int:
    from app.match.assembly import load_configured_encoder
    from app.release import release_build
    from index.build import BuildError, BuildInterrupted

    print(f"encoder {encoder.id} (dim {encoder.dim}) on {getattr(encoder, 'device', 'cpu')}, runtime "
          f"{getattr(encoder, 'runtime', 'torch')}; "
          f"n_trees={n_trees} search_k={search_k}")
    query, query_encoder = None, None
    asked = args.query_encoder or settings.query_encoder
    if asked:  # balanced mode: record the query encoder, refused unless fitted to this encoder
        from index.artifacts import EncoderMismatch, check_query_encoder
        from models.encoders.load import NAMED_SPECS

        query_spec = asked if asked in NAMED_SPECS else str(Path(asked).resolve())
        try:
            query_encoder = load_configured_encoder(settings, spec=query_spec)
            check_query_encoder({"encoder_id": encoder.id, "version": "(new)"}, query_encoder)
        except (EncoderMismatch, OSError, ValueError) as exc:
            return _error(f"{'--query-encoder' if args.query_encoder else 'FAQ_QUERY_ENCODER'}: {exc} "
                          f"(current index unchanged)")
        query = {"spec": query_spec, "id": query_encoder.id, "teacher": query_encoder.teacher}
        print(f"query encoder {query_encoder.id} (fitted to {query_encoder.teacher})")
    try:
        from app.stages import vector_stages

        stages = vector_stages(settings)  # FAQ_RERANKER's Siamese matchers: their phrasing vectors go in the build
    except (OSError, ValueError) as exc:
        return _error(f"FAQ_RERANKER: {exc} (current index unchanged)")
    try:
        released = release_build(
            store, encoder, registry, settings, labels=lambda: _labels(args, store), report=print,
            activate=not args.no_activate, force=args.force, min_labels=args.min_labels, max_drop=args.max_drop,
            n_trees=n_trees, search_k=search_k, batch_size=args.batch_size,
            progress=not args.no_progress and sys.stderr.isatty(), recall_floor=args.recall_floor,
            encoder_spec=spec, lexical=not args.no_lexical, es_url=settings.es_url,
            es_index_prefix=settings.es_index_prefix, stage_vectors=stages, query_encoder=query,
            query_side=query_encoder,
        )
    except (BuildError, IndexVerificationError) as exc:
        return _error(f"{exc} (current index unchanged)")
    except BuildInterrupted as exc:
        return _error(f"build {exc}: marked failed, staging folder removed, current index unchanged", exc.exit_code)
    manifest, version, verdict = released.manifest, released.version, released.verdict
    if released.labels_problem is not None:
        return _error(f"{released.labels_problem} (build {version} kept, not made current)")
    if not args.no_activate and not released.current:
        return _error(f"build {version} matches the labelled queries worse than {verdict.current} ({verdict.after:.4f} < "
                      f"{verdict.before:.4f} - {args.max_drop}): not made current. `faq index activate {version}"
                      f"{_kb_flag(settings)}` or --force makes it current anyway")
    if released.pruned:
        print(f"pruned old versions: {', '.join(released.pruned)}")
    t = manifest["timings"]
    print(f"built {manifest['version']}: {manifest['n_variants']} variants of {manifest['n_faqs']} FAQs, "
          f"{manifest['annoy_bytes'] / 1e6:.1f} MB; encode {t['encode_s']:.1f}s "
          f"({t['encode_sentences_per_s']:.0f} sentences/s), annoy {t['annoy_build_s']:.2f}s, "
          f"verify {t['verify_s']:.2f}s, total {t['total_s']:.1f}s"
          + ("" if args.no_activate else "; now current"))
    print(expected_precision_text(manifest, settings))
    png = registry.path(manifest["version"]) / CURVE_FILE
    if plot_expected_precision(manifest, settings, png):
        print(f"expected-precision curve: {png}")
    return 0


def _labels(args: argparse.Namespace, store, feedback: bool = True, since=None) -> list[tuple[str, str | None]]:
    """Labelled queries from --dev and the query log's feedback; raises LabelsUnusable."""
    from app.release.gate import labelled_queries

    return labelled_queries(store, args.dev, feedback=feedback, since=since)


def cmd_calibrate(args: argparse.Namespace) -> int:
    with open_kb(args) as scope:
        return _calibrate(args, scope.settings, scope.store)


def _calibrate(args: argparse.Namespace, settings, store) -> int:
    from datetime import datetime

    from app.release.gate import LabelsUnusable
    from app.release.calibration import fit_stage, refit_on_labels, save_refit
    from index.decision import PRIOR_STRENGTH

    target = settings.kb_decision_model
    if args.reset:
        target.unlink(missing_ok=True)
        print(f"removed {target}: the service scores with the cross-KB model from its next start")
        return 0
    strength = PRIOR_STRENGTH if args.strength is None else args.strength
    if not strength > 0:
        return _error(f"--strength must be > 0, got {strength}")
    try:
        since = datetime.fromisoformat(args.since) if args.since else None
    except ValueError:
        return _error(f"--since {args.since!r}: not a date (YYYY-MM-DD)")
    registry = _registry(settings)
    version = registry.current()
    if version is None:
        from app.match import NoIndexError

        return _error(str(NoIndexError(kb=None if settings.kb == DEFAULT_KB else settings.kb)))
    try:
        labels = _labels(args, store, feedback=not args.no_feedback, since=since)
    except LabelsUnusable as exc:
        return _error(str(exc))
    if not labels:
        return _error("no labels: give --dev FILE, or collect /feedback (a clarify option picked, an answer "
                      "marked correct) first")
    try:
        refit = refit_on_labels(settings, store, registry, version, labels, strength)
    except ValueError as exc:
        return _error(str(exc))
    report = refit.report
    if settings.reranker:
        try:
            stack = fit_stage(settings, refit, print)
        except (OSError, ValueError) as exc:
            return _error(f"FAQ_RERANKER: {exc}")
        if stack is not None:
            stage_id, coefs, n = stack
            print(f"  stage {stage_id} stacked with the model on {n} labelled candidates: "
                  f"P = sigmoid({coefs[0]:.3f} * logit p_stage + {coefs[1]:.3f} * logit p_model + {coefs[2]:.3f})")
    print(f"{report['labels']} labels ({sum(f is None for _, f in labels)} out of scope), prior strength {strength:g}")
    if report["folds"]:
        for name in ("cross_kb", "refitted"):
            r = report[name]
            print(f"  {name:9s} {report['folds']}-fold on the labels: top-1 {r['top1']:.4f}, answer F1 at 0.5 "
                  f"{r['f1']:.4f}, log loss {r['log_loss']:.4f}")
    else:
        print("  too few labels for a 5-fold comparison")
    if args.dry_run:
        print("dry run: nothing written")
        return 0
    save_refit(refit, version, target)
    print(f"wrote {target}: the service scores with it from its next start (--reset to undo)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with open_kb(args) as scope:
        return _list(scope.settings, scope.store)


def _list(settings, store) -> int:
    manifests = _registry(settings).list()
    if not manifests:
        print(f"no index versions yet: run `faq index build{_kb_flag(settings)}`")
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
        from index.decision import MIN_TRAFFIC, TRAFFIC_WINDOW

        scores: list[float] = []
        if settings.query_log:
            scores = store.recent_scores(current["version"], ("ann", "lexical"), TRAFFIC_WINDOW)
        print()
        print(expected_precision_text(current, settings, scores if len(scores) >= MIN_TRAFFIC else None))
    return 0


def expected_precision_text(manifest: dict, settings, traffic: list[float] | None = None) -> str:
    """The build's threshold -> expected precision / answer rate table as served with `settings`: from its
    own logged `traffic` scores when given, else the one replayed at build time."""
    from app.match.decider import Decider
    from index.decision import traffic_table

    table = _served_table(manifest, settings)
    if table is None:
        return f"{manifest['version']}: no expected-precision table (scoring by the build's cosine curve)"
    if traffic:
        table = traffic_table(traffic)
    chosen = Decider(None, target_precision=settings.target_precision,
                     default_threshold=settings.default_threshold).threshold(None, table)
    source = (f"from its {len(traffic)} latest logged queries" if traffic else
              f"{settings.oos_share:.0%} of questions assumed out of scope")
    lines = [f"{manifest['version']}: expected precision and answer rate by threshold "
             f"({source}; * = the threshold served)",
             f"  {'THRESHOLD':>9} {'PRECISION':>9} {'ANSWERED':>8}"]
    for row in table:
        ep = "-" if row["expected_precision"] is None else f"{row['expected_precision']:.3f}"
        mark = "*" if abs(row["threshold"] - chosen) < 1e-9 else " "
        lines.append(f"{mark} {row['threshold']:>9.2f} {ep:>9} {row['answer_rate']:>8.3f}")
    return "\n".join(lines)


def cmd_activate(args: argparse.Namespace) -> int:
    from app.release import activate_version

    with open_kb(args) as scope:  # the store, for the activation's audit row
        registry = _registry(scope.settings)
        try:
            activate_version(registry, args.version, store=scope.store)
        except (UnknownVersion, IndexVerificationError) as exc:
            return _error(str(exc))
    print(f"current -> {args.version}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    settings = kb_settings(args)
    registry = _registry(settings)
    version = args.version or registry.current()
    if version is None:
        return _error(f"no current index version: run `faq index build{_kb_flag(settings)}` or name a VERSION")
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
    from app.store import SchemaNotReady
    from index.build import sweep_builds

    try:
        scope = open_kb(args, migrate=not args.dry_run)  # not even a migration: a dry run changes nothing
    except SchemaNotReady as exc:
        return _error(str(exc))
    with scope:
        report = sweep_builds(scope.store, _registry(scope.settings), dry_run=args.dry_run)
    print(("dry run: would have " if args.dry_run else "") + report.summary())
    for version in sorted(set(report.failed) | set(report.removed)):
        print(f"  {version}: " + ", ".join(
            ([] if version not in report.failed else ["row marked failed"])
            + ([] if version not in report.removed else ["staging folder removed"])))
    return 0
