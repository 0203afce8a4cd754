"""`faq kb publish | published | rollback | diff`: a KB's draft published to production, its publications listed,
an earlier one served again, and what changed between any two (app/release/publishing.py). A running service
picks a publication made here up on its next KB poll."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.release.publishing import DRAFT, NothingToPublish, PublishingError, diff_of, publish, rollback
from cli.scope import add_kb_option, open_kb

EXIT_OK, EXIT_REFUSED, EXIT_BAD_INPUT = 0, 1, 2


def register_publishing(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("publish", help="publish the KB's draft: production answers from it",
                       description="Snapshot the draft (FAQs, phrasings, answers in every language, metadata, tags, "
                                   "follow-ups, context-only flags, small-talk answers) as the KB's next publication. "
                                   "With publishing=reviewed, production answers from the latest publication; the "
                                   "test deployment from the draft. With 20 or more /feedback labels, they gate it: "
                                   "a draft that matches them worse is not published (--force publishes anyway).")
    p.add_argument("--note", default=None, help="what this publication is (at most 1000 characters)")
    p.add_argument("--force", action="store_true", help="publish even when the KB's labels say it matches worse")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_kb_option(p)
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("published", help="list the KB's publications, newest first",
                       description="Each publication: id, kind (publish or rollback), who, when, the note and the "
                                   "change summary.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_kb_option(p)
    p.set_defaults(func=cmd_published)

    p = sub.add_parser("rollback", help="serve an earlier publication on production again",
                       description="Make publication ID's content the latest publication again (a KB with "
                                   "publishing=reviewed): production answers from it, on the served index, and the "
                                   "draft keeps its edits (`faq kb diff` shows them).")
    p.add_argument("id", help="the publication to serve again (`faq kb published`)")
    p.add_argument("--note", default=None, help="why (at most 1000 characters)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_kb_option(p)
    p.set_defaults(func=cmd_rollback)

    p = sub.add_parser("diff", help="what changed between two publications, or a publication and the draft",
                       description="Each FAQ added, removed or changed; for a changed one each field before and "
                                   "after, phrasings added and removed, and the answer word by word.")
    p.add_argument("--from", dest="start", default=None, metavar="ID", help="a publication (default: the latest)")
    p.add_argument("--to", dest="end", default=DRAFT, metavar="draft|ID", help="the draft (default) or a publication")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_kb_option(p)
    p.set_defaults(func=cmd_diff)


def _refused(exc: PublishingError) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT if exc.status in (404, 422) else EXIT_REFUSED


def _gate(scope: Any) -> Any:
    """The label gate over the current build, loaded only when the KB has enough labels to gate with."""
    from app.match.assembly import load_configured_encoder
    from app.release.gate import MIN_LABELS, content_gate, feedback_labels_of
    from index.artifacts import BuildRegistry
    from index.retriever import Retriever

    labels = feedback_labels_of(scope.store)
    registry = BuildRegistry(scope.settings.index_dir)
    version = registry.current()
    if version is None or sum(f is not None for _, f in labels) < MIN_LABELS:
        return None
    retriever = Retriever.load(registry.path(version))
    encoder = load_configured_encoder(scope.settings, retriever.manifest)
    return content_gate(scope.settings, encoder, retriever, labels)


def _print_outcome(done: Any, as_json: bool, kb: str, reviewed: bool) -> None:
    row = done.publication
    if as_json:
        print(json.dumps({"published": True, "publication": row.as_dict(), "changes": done.changes}, indent=2,
                         ensure_ascii=False))
        return
    s = row.summary
    what = "rolled back to publication %s as" % row.restored if row.kind == "rollback" else "published"
    print(f"KB {kb!r}: {what} publication {row.id}: {s['added']} FAQs added, {s['removed']} removed, "
          f"{s['changed']} changed{'; small-talk answers changed' if s['small_talk_answers'] else ''} "
          f"({s['faqs']} FAQs, {s['phrasings']} phrasings)")
    if not reviewed:
        print("publishing is immediate: edits were live already; this publication is a record to diff against "
              "(`faq kb settings --set publishing=reviewed` serves production from publications)")


def cmd_publish(args: argparse.Namespace) -> int:
    with open_kb(args) as scope:
        reviewed = scope.settings.publishing == "reviewed"
        try:
            done = publish(scope.store, args.note, gate=_gate(scope), force=args.force)
        except NothingToPublish as nothing:
            print(json.dumps({"published": False, "message": str(nothing), "latest": nothing.latest})
                  if args.json else f"KB {scope.name!r}: {nothing}")
            return EXIT_OK
        except PublishingError as exc:
            return _refused(exc)
        _print_outcome(done, args.json, scope.name, reviewed)
    return EXIT_OK


def cmd_published(args: argparse.Namespace) -> int:
    with open_kb(args) as scope:
        rows = scope.store.publications.list()
        mode = scope.settings.publishing
    if args.json:
        print(json.dumps({"kb": scope.name, "publishing": mode, "publications": [r.as_dict() for r in rows]},
                         indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print(f"KB {scope.name!r} has no publications (publishing={mode}): `faq kb publish --kb {scope.name}`")
        return EXIT_OK
    print(f"KB {scope.name!r} (publishing={mode}); production serves the first one listed" if mode == "reviewed"
          else f"KB {scope.name!r} (publishing={mode}: production serves the draft)")
    for r in rows:
        s = r.summary
        kind = f"rollback to {r.restored}" if r.kind == "rollback" else "publish"
        print(f"{r.id:>5}  {r.created_at:%Y-%m-%d %H:%M:%S}  {kind:<16} {r.actor or '-':<16} "
              f"+{s['added']} -{s['removed']} ~{s['changed']}  {r.note or ''}")
    return EXIT_OK


def cmd_rollback(args: argparse.Namespace) -> int:
    with open_kb(args) as scope:
        reviewed = scope.settings.publishing == "reviewed"
        try:
            done = rollback(scope.store, args.id, args.note, reviewed=reviewed)
        except NothingToPublish as nothing:
            print(f"KB {scope.name!r}: {nothing}")
            return EXIT_OK
        except PublishingError as exc:
            return _refused(exc)
        _print_outcome(done, args.json, scope.name, reviewed)
    return EXIT_OK


def _fields_text(change: dict) -> list[str]:
    lines = []
    phrasings = change.get("phrasings")
    if phrasings:
        lines += [f"    + phrasing: {q}" for q in phrasings["added"]]
        lines += [f"    - phrasing: {q}" for q in phrasings["removed"]]
    answer = change.get("answer")
    if answer:
        words = "".join(t if op == "=" else f"[{op}{t.rstrip()}]" + t[len(t.rstrip()):] for op, t in answer["words"])
        lines.append(f"    answer: {words}")
    for name, both in (change.get("fields") or {}).items():
        lines.append(f"    {name}: {json.dumps(both['before'], ensure_ascii=False)} -> "
                     f"{json.dumps(both['after'], ensure_ascii=False)}")
    return lines


def cmd_diff(args: argparse.Namespace) -> int:
    with open_kb(args) as scope:
        try:
            found = diff_of(scope.store, args.start, args.end)
        except PublishingError as exc:
            return _refused(exc)
    if args.json:
        print(json.dumps(found, indent=2, ensure_ascii=False))
        return EXIT_OK
    print(f"KB {scope.name!r}: {found['from']} -> {found['to']}: {len(found['added'])} added, "
          f"{len(found['removed'])} removed, {len(found['changed'])} changed")
    for faq in found["added"]:
        print(f"  added    {faq['faq_id']}: {len(faq['phrasings'])} phrasings")
    for faq in found["removed"]:
        print(f"  removed  {faq['faq_id']}")
    for change in found["changed"]:
        print(f"  changed  {change['faq_id']}")
        print("\n".join(_fields_text(change)))
    if found["small_talk_answers"] is not None:
        print("  small-talk answers changed")
    return EXIT_OK
