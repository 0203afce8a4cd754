"""`faq eval ...`: offline evaluation (`faq eval match`, `faq eval ab`) through the same store/index/matcher
as serving, and the online A/B report from the query log (`faq eval online`)."""
from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    from cli.scope import add_kb_option

    ev = subparsers.add_parser("eval", help="evaluate matching quality")
    ev_sub = ev.add_subparsers(dest="eval_command", metavar="SUBCOMMAND")
    p = ev_sub.add_parser(
        "match",
        help="import a KB into a fresh store, build the index, match labelled queries, report metrics",
        description="Runs the product's own path (FaqStore -> build_index -> Matcher) on a scratch SQLite "
        "store. The answer threshold is tuned on --dev (max answer F1), else the default threshold is used.",
    )
    p.add_argument("--kb", required=True, help="KB file (JSONL/CSV)")
    p.add_argument("--queries", required=True, help="test queries JSONL {query, faq_id|null}")
    p.add_argument("--dev", help="dev queries for threshold tuning")
    p.add_argument("--model", help="encoder: 'minilm', 'msem' or an MSEM model folder (default: FAQ_ENCODER, else minilm)")
    p.add_argument("--query-encoder", help="encode the queries with this folder (faq train query-encoder), fitted "
                   "into --model's space; the index is still built by --model")
    p.add_argument("--json", required=True, dest="json_out", help="write the full report as JSON here")
    p.add_argument("--md", dest="md_out", help="also write a Markdown summary here")
    p.add_argument("--workdir", help="keep the scratch store and index here (default: a temp folder, removed)")
    p.add_argument("--top-k", type=int, default=10, help="FAQs per query (MRR depth), default 10")
    p.add_argument("--batch-size", type=int, default=256, help="queries per matcher call, default 256")
    p.add_argument("--n-trees", type=int, help="Annoy trees (default: settings.ann_n_trees)")
    p.add_argument("--search-k", type=int, help="Annoy search_k (default: settings.ann_search_k)")
    p.add_argument("--variants-per-faq", type=int, help="keep only each FAQ's first N phrasings of the KB "
                   "(1 = a KB with a single question per FAQ)")
    p.add_argument("--reranker", help="re-ranker folder(s), comma-separated (faq train reranker or faq train mmaicm): "
                   "run the ann+rerank arm")
    p.add_argument("--rerank-k", type=int, help="FAQs the re-ranker re-scores per query (default: settings.rerank_k)")
    p.add_argument("--rerank-weight", type=float, help="cross-encoder weight in the pool with the calibrated cosine "
                   "(0..1; default: FAQ_RERANK_WEIGHT, else the re-ranker's fusion_weight)")
    p.add_argument("--tune-rerank-weight", action="store_true", help="choose the weight on --dev (grid 0, 0.1, .., 1; "
                   "max answer F1) before the dev/test runs")
    p.add_argument("--pool-variants", type=_pool_list, help="a FAQ's cosine = mean of its best N phrasings' "
                   "(default: FAQ_POOL_VARIANTS, 2); a list such as 1,2,3,5 is tried on --dev and the best "
                   "dev answer F1 is used")
    p.add_argument("--answer-weight", type=_weight_list, help="the answer's share of a FAQ's score, 0..0.9 "
                   "(default: FAQ_ANSWER_WEIGHT); a list such as 0,0.3,0.5 is tried on --dev (with the pool sizes) "
                   "and the best dev answer F1 is used. Ignored for a KB whose answers are placeholders")
    p.add_argument("--tune-answer-weight", action="store_true", help="choose the answer weight on --dev from "
                   "0, 0.1, .., 0.9 (max answer F1, then top-1)")
    p.set_defaults(func=cmd_match)

    p = ev_sub.add_parser(
        "pairs",
        help="paraphrase-pair accuracy of an encoder's cosine (e.g. QQP, MRPC)",
        description="Encodes both sides of labelled pairs (`label<TAB>q1<TAB>q2`) and reports accuracy at MSEM's "
        "matching-layer threshold (cos >= alpha), at a threshold tuned on --dev-pairs, and ROC AUC.",
    )
    p.add_argument("--pairs", required=True, help="test pairs TSV")
    p.add_argument("--dev-pairs", help="pairs for threshold tuning")
    p.add_argument("--model", help="encoder: 'minilm', 'msem' or an MSEM model folder")
    p.add_argument("--siamese", action="append", default=[], help="a Siamese matcher folder (faq train siamese), "
                   "added to the classifier table (log loss, P / R / F1, AUC) next to the cosine and the char "
                   "n-gram baseline; repeatable; needs --dev-pairs")
    p.add_argument("--cosine", action="append", default=[], metavar="SPEC", help="another encoder whose cosine "
                   "(through a sigmoid fitted on --dev-pairs) is a row of the classifier table, e.g. mpnet or msem; "
                   "repeatable")
    p.add_argument("--reranker", action="append", default=[], metavar="DIR", help="a cross-encoder folder (faq "
                   "train reranker) whose match probability is a row of the classifier table; repeatable")
    p.add_argument("--json", required=True, dest="json_out", help="write the report as JSON here")
    p.set_defaults(func=cmd_pairs)
    from cli import eval_reranker

    eval_reranker.register(ev_sub)

    p = ev_sub.add_parser(
        "ab",
        help="offline A/B of the retrieval arms (ann, ann+rerank, lexical, lexical+rerank): report.md/json + PNGs",
        description="Imports the KB into a scratch store, builds the Annoy and lexical indexes (one version), runs "
        "every arm through the Matcher as /match does, tunes each arm's threshold on --dev, and writes report.md, "
        "report.json, pr_threshold.png and latency.png into --out. --out/work is reused while the KB, the encoder "
        "and the index parameters are unchanged. `+rerank` arms need --reranker (or FAQ_RERANKER): without one "
        "they are skipped and the report says so.",
    )
    p.add_argument("--kb", required=True, help="KB file (JSONL/CSV)")
    p.add_argument("--queries", required=True, help="test queries JSONL {query, faq_id|null}")
    p.add_argument("--dev", help="dev queries: each arm's answer threshold is tuned on them (max answer F1)")
    p.add_argument("--arms", default="ann,ann+rerank,lexical,lexical+rerank", help="comma-separated arms (default: all four)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--model", help="encoder: 'minilm', 'msem' or an MSEM model folder (default: FAQ_ENCODER, else the default)")
    p.add_argument("--reranker", help="cross-encoder folder for the +rerank arms (default: FAQ_RERANKER)")
    p.add_argument("--es-url", help="evaluate the lexical arms on this Elasticsearch (default: FAQ_ES_URL; unset: tantivy)")
    p.add_argument("--lexical-engine", choices=["tantivy", "elasticsearch"], help="default: elasticsearch with a URL, else tantivy")
    p.add_argument("--lexical-k", type=int, help="BM25 candidates per query (default: FAQ_LEXICAL_K, 30)")
    p.add_argument("--rerank-k", type=int, help="FAQs the re-ranker scores (default: FAQ_RERANK_K, 20)")
    p.add_argument("--latency-sample", type=int, default=200, help="test queries timed one by one per arm (default 200)")
    p.add_argument("--batch-size", type=int, default=256, help="queries per matcher call (default 256)")
    p.add_argument("--fresh", action="store_true", help="rebuild the store, index and query vectors in the work folder")
    p.add_argument("--workdir", help="work folder (scratch store, build, query vectors; default --out/work): runs that "
                   "differ only in --arms/--lexical-k/--rerank-k can share one")
    p.add_argument("--variants-per-faq", type=int, help="keep only each FAQ's first N phrasings of the KB "
                   "(1 = a KB with a single question per FAQ, as in the paper's FAQ)")
    p.set_defaults(func=cmd_ab)

    p = ev_sub.add_parser(
        "online",
        help="online A/B report from the query log and /feedback: per-arm answer rate, accuracy, latency, significance",
        description="Reads one KB's query log in the configured store (FAQ_DATABASE_URL). Per arm: answer rate and accuracy "
        "from feedback with Wilson intervals, latency percentiles with an interval for the median; each arm is "
        "compared with the control arm (z-tests, Mann-Whitney U) and a difference that is not yet significant is "
        "reported as such, with the sample size the observed difference would need.",
    )
    p.add_argument("--since", help="only requests at or after this ISO time (e.g. 2026-11-01 or 2026-11-01T12:00:00Z)")
    p.add_argument("--until", help="only requests before this ISO time")
    p.add_argument("--arms", help="comma-separated arms to include (default: every logged arm)")
    p.add_argument("--control", help="arm the others are compared with (default: ann, else the busiest arm)")
    p.add_argument("--out", help="also write report.md and report.json into this folder")
    add_kb_option(p, help="the KB whose query log is read (default: FAQ_KB, else 'default')")
    p.set_defaults(func=cmd_online)

    p = ev_sub.add_parser(
        "answer-selection",
        help="answer sentence selection on WikiQA / TrecQA: encoder cosine vs MMAICM models, alone and fused",
        description="On the test split: MAP / MRR over the questions with a correct answer (TrecQA: and a wrong "
        "one), and the MMAICM paper's protocol (the true answer among --fakes random answers of other questions: "
        "nDCG, P@1). Rows: the encoder's cosine, each --model, and each model fused with the cosine "
        "((1 - λ) z(cos) + λ z(model), λ chosen on dev MAP). Writes report.json and report.md into --out.",
    )
    p.add_argument("--data", required=True, choices=("wikiqa", "trecqa"))
    p.add_argument("--src", required=True, help="the dataset folder (WikiQA-*.txt or train/dev/test.csv)")
    p.add_argument("--model", action="append", default=[], help="an MMAICM model folder (faq train mmaicm); repeatable")
    p.add_argument("--out", required=True, help="output folder for report.json and report.md")
    p.add_argument("--encoder", default="minilm", help="the sentence encoder whose cosine is the baseline (default minilm)")
    p.add_argument("--fusion", choices=("zscore", "logistic"), default="zscore",
                   help="z(·) of the fusion: per-question standardisation (default) or a logistic calibration fitted on dev")
    p.add_argument("--fakes", type=int, default=5, help="random other answers per question in the paper's protocol (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the paper protocol's draws (default 0)")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    p.add_argument("--protocol", choices=("standard", "analogy"), default="standard",
                   help="standard (default: the rows above) or analogy: the analogy paper's who / when / where subsets, "
                   "per type and combined with bootstrap intervals; --model then takes `faq train analogy` folders")
    p.add_argument("--encoders", default="glove,minilm,mpnet", help="analogy protocol: fixed encoders whose cosine "
                   "and analogy score are rows (glove = GloVe average; default glove,minilm,mpnet)")
    p.add_argument("--prototypes", type=int, default=30, help="analogy protocol: prototypes per type from train for "
                   "the fixed encoders' analogy rows (default 30)")
    p.add_argument("--bootstrap", type=int, default=1000, help="analogy protocol: bootstrap resamples (default 1000)")
    p.set_defaults(func=cmd_answer_selection)
    for name, module in STUDIES.items():
        # each study parses its own arguments: `faq eval NAME --help` is its help
        p = ev_sub.add_parser(name, add_help=False, help=_first_line(module),
                              description=f"`faq eval {name} ARGS` is `python -m {module} ARGS`")
        # its arguments are the ones the parser does not know (cli/main.py hands them over as `study_args`)
        p.set_defaults(study=module, func=lambda args, module=module: _run_study(module, args.study_args))
    ev.set_defaults(func=lambda args: (ev.print_help(), 2)[1])


#: the evaluations with their own commands (a module each under evaluation/, with `main(argv)`), run one way:
#: `faq eval NAME ARGS`
STUDIES = {name.replace("_", "-"): f"evaluation.{name}" for name in (
    "cluster_cosine", "decision", "filter_calibration", "kb_lint", "kb_mine", "language_id", "multilingual",
    "query_encoder", "query_encoder_fusion", "review_loop", "turns")}


def _first_line(module: str) -> str:
    """The first line of a study's docstring, read without importing it (some load models at import)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return module
    with open(spec.origin, encoding="utf-8") as fh:
        doc = ast.get_docstring(ast.parse(fh.read())) or module
    first = " ".join(doc.split("\n\n")[0].split())
    return first.split(". ")[0].rstrip(".:")


def _run_study(module: str, argv: list[str]) -> int:
    import importlib

    code = importlib.import_module(module).main(argv)
    return code if isinstance(code, int) else 0


def _pool_list(text: str) -> list[int]:
    from index.pooling import MAX_POOL

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(not 1 <= v <= MAX_POOL for v in values):
        raise argparse.ArgumentTypeError(f"--pool-variants: expected whole numbers in 1..{MAX_POOL} separated by commas, got {text!r}")
    return values


def _weight_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(not 0.0 <= v <= 0.9 for v in values):
        raise argparse.ArgumentTypeError(f"--answer-weight: expected numbers in 0..0.9 separated by commas, got {text!r}")
    return values


def cmd_match(args: argparse.Namespace) -> int:
    from evaluation.match import ANSWER_WEIGHT_GRID, format_table, run_eval_match, write_report
    from kb.records import KbValidationError
    from index.artifacts import IndexVerificationError
    from index.build import BuildError

    if args.top_k < 5:
        print("error: --top-k must be >= 5 (recall@5 is reported)", file=sys.stderr)
        return 2
    if args.batch_size < 1:
        print("error: --batch-size must be >= 1", file=sys.stderr)
        return 2
    if args.rerank_weight is not None and not 0 <= args.rerank_weight <= 1:
        print("error: --rerank-weight must be in 0..1", file=sys.stderr)
        return 2
    if args.rerank_k is not None and args.rerank_k < 1:
        print("error: --rerank-k must be >= 1", file=sys.stderr)
        return 2
    if args.variants_per_faq is not None and args.variants_per_faq < 1:
        print("error: --variants-per-faq must be >= 1", file=sys.stderr)
        return 2
    if args.tune_answer_weight and args.answer_weight:
        print("error: --tune-answer-weight and --answer-weight are exclusive (give the list to --answer-weight)",
              file=sys.stderr)
        return 2
    if args.tune_answer_weight and not args.dev:
        print("error: --tune-answer-weight needs --dev queries to choose on", file=sys.stderr)
        return 2
    try:
        report = run_eval_match(args.kb, args.queries, args.dev, args.model, args.workdir,
                                top_k=args.top_k, batch_size=args.batch_size,
                                n_trees=args.n_trees, search_k=args.search_k,
                                variants_per_faq=args.variants_per_faq,
                                reranker=args.reranker, rerank_k=args.rerank_k,
                                rerank_weight=args.rerank_weight, tune_rerank_weight=args.tune_rerank_weight,
                                pool_variants=args.pool_variants,
                                answer_weights=ANSWER_WEIGHT_GRID if args.tune_answer_weight else args.answer_weight,
                                query_encoder=args.query_encoder)
    except IndexVerificationError as exc:
        # e.g. a barely trained encoder whose vectors crowd together: Annoy needs more trees / search_k
        print(f"error: {exc} (try --n-trees / --search-k)", file=sys.stderr)
        return 2
    except (KbValidationError, BuildError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_report(report, args.json_out, args.md_out)
    print(format_table(report))
    print(f"report written to {args.json_out}" + (f" and {args.md_out}" if args.md_out else ""))
    return 0


def cmd_pairs(args: argparse.Namespace) -> int:
    from evaluation.pairs import format_pairs_report, run_eval_pairs, write_pairs_report
    from training.pairs import PairFileError

    try:
        report = run_eval_pairs(args.pairs, args.model, args.dev_pairs, siamese=args.siamese, cosines=args.cosine,
                                rerankers=args.reranker)
    except (PairFileError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_pairs_report(report, args.json_out)
    print(format_pairs_report(report))
    return 0


def cmd_ab(args: argparse.Namespace) -> int:
    from evaluation.ab import format_ab_table, parse_arms, run_eval_ab
    from kb.records import KbValidationError
    from index.artifacts import IndexVerificationError
    from index.build import BuildError
    from index.lexical import LexicalUnavailable

    try:
        arms = parse_arms(args.arms)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name in ("lexical_k", "rerank_k", "batch_size", "variants_per_faq"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    if args.latency_sample < 0:
        print("error: --latency-sample must be >= 0", file=sys.stderr)
        return 2
    try:
        report = run_eval_ab(
            args.kb, args.queries, args.out, dev_path=args.dev, arms=arms, model=args.model, reranker_path=args.reranker,
            es_url=args.es_url, lexical_engine=args.lexical_engine, lexical_k=args.lexical_k, rerank_k=args.rerank_k,
            latency_sample=args.latency_sample, batch_size=args.batch_size, fresh=args.fresh, workdir=args.workdir,
            variants_per_faq=args.variants_per_faq,
            progress=True,
        )
    except LexicalUnavailable as exc:
        print(f"error: lexical engine unavailable: {exc}", file=sys.stderr)
        return 2
    except IndexVerificationError as exc:
        print(f"error: {exc} (try FAQ_ANN_N_TREES / FAQ_ANN_SEARCH_K)", file=sys.stderr)
        return 2
    except (KbValidationError, BuildError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_ab_table(report))
    print(f"report written to {args.out}/report.md, report.json, pr_threshold.png, latency.png")
    return 0


def _parse_time(value: str | None, flag: str):
    from datetime import datetime, timezone

    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{flag}: not an ISO date/time: {value!r}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def cmd_online(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from evaluation.online import format_online_markdown, online_report, write_online_report
    from cli.scope import open_kb

    try:
        since, until = _parse_time(args.since, "--since"), _parse_time(args.until, "--until")
        arms = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else None
        with open_kb(args) as scope:
            report = online_report(scope.store, since=since, until=until, arms=arms, control=args.control)
    except ValidationError:  # a bad FAQ_* value: cli/main.py names the variable, as for every command
        raise
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not report["requests"]:
        print("no logged /match requests in that window (is FAQ_QUERY_LOG on, and FAQ_DATABASE_URL the service's?)")
    print(format_online_markdown(report))
    if args.out:
        json_path, md_path = write_online_report(report, args.out)
        print(f"report written to {md_path} and {json_path}")
    return 0


def cmd_answer_selection(args: argparse.Namespace) -> int:
    import shlex

    from evaluation.answer_selection import (
        format_analogy_markdown,
        format_markdown,
        run_analogy_selection,
        run_answer_selection,
        write_report,
    )

    if args.threads is not None:
        if args.threads < 1:
            print("error: --threads must be >= 1", file=sys.stderr)
            return 2
        import torch

        torch.set_num_threads(args.threads)
    command = "faq " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else None
    render = format_markdown
    try:
        if args.protocol == "analogy":

            encoders = [e.strip() for e in args.encoders.split(",") if e.strip()]
            report = run_analogy_selection(args.data, args.src, args.model, encoders=encoders,
                                           prototypes=args.prototypes, seed=args.seed, bootstrap=args.bootstrap,
                                           command=command)
            render = format_analogy_markdown
        else:
            report = run_answer_selection(args.data, args.src, args.model, encoder=args.encoder, fusion=args.fusion,
                                          seed=args.seed, fakes=args.fakes, progress=True, command=command)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json_path, md_path = write_report(report, args.out)
    print(render(report))
    print(f"report written to {md_path} and {json_path}")
    return 0
