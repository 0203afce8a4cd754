"""Draft, publish, roll back: how a KB's edits reach its users.

Every edit (console, admin API, imports, review accepts, small-talk answers) writes the KB's rows: that is
the **draft**. With `publishing=immediate` (the default) the draft is what users get, at once. With
`publishing=reviewed`, production answers from the KB's latest **publication**, a snapshot of the draft's
content taken by `publish` (app/store/publications.py), while the `test` deployment answers from the draft;
`rollback` makes an earlier publication's content the latest again. The served build is reused for both:
production is the current build with the publication's content applied as a delta (index/retriever.py
`with_kb`), so a publication encodes only the phrasings and answers the build does not hold.

`diff` compares any two contents (a publication or the draft): each FAQ added, removed or changed, and for a
changed one each field before and after, phrasings added and removed, and the answer word by word.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Callable

from app.store.audit import current_actor
from app.store.publications import PublicationRow, snapshot_content
from kb.records import text_problem

#: a publication's note, at most
MAX_NOTE_CHARS = 1000
#: a publication's number, at most this many digits (a KB publishing every second would need 30 years)
MAX_NUMBER_DIGITS = 9
#: the fields of an FAQ a diff compares one by one (phrasings and the answer have their own views)
FIELDS = ("tags", "metadata", "source", "follow_ups", "context_only", "answers")
DRAFT = "draft"


class PublishingError(Exception):
    """A publish, rollback or diff that cannot be done as asked; `status` is how the API answers it."""

    status = 409


class NothingToPublish(PublishingError):
    """The content asked for is already the latest publication's: nothing is published (not an error to the
    caller: the API answers 200 saying so)."""

    status = 200

    def __init__(self, latest: int):
        super().__init__(f"nothing changed since publication {latest}: nothing published")
        self.latest = latest


class PublishConflict(PublishingError):
    """Another publication was made while this one was prepared: the later one loses."""

    def __init__(self):
        super().__init__("another publish or rollback of this KB finished first; look at what it published "
                         "(`faq kb published`) and try again")


class PublicationNotFound(PublishingError):
    status = 404

    def __init__(self, kb: str, publication_id: Any):
        shown = publication_id if str(publication_id).isascii() and str(publication_id).isprintable() \
            else repr(publication_id)
        super().__init__(f"KB {kb!r} has no publication {shown} (`faq kb published --kb {kb}` lists them)")
        self.publication_id = publication_id


class NotReviewed(PublishingError):
    """A rollback in a KB whose edits are live at once: there is no published KB apart from the draft."""

    def __init__(self, kb: str):
        super().__init__(f"KB {kb!r} publishes edits immediately, so there is no earlier publication to serve: "
                         f"`faq kb settings --kb {kb} --set publishing=reviewed` first")


class BadNote(PublishingError, ValueError):
    status = 422


class GateRefused(PublishingError):
    """The KB's labels say the draft answers worse than the published KB."""

    def __init__(self, verdict: Any):
        super().__init__(f"not published: the KB's labels say the draft matches worse ({verdict}); fix the draft, "
                         f"or publish with --force")
        self.verdict = verdict


def check_note(note: str | None) -> str | None:
    if note is None:
        return None
    if len(note) > MAX_NOTE_CHARS:
        raise BadNote(f"note: at most {MAX_NOTE_CHARS} characters, got {len(note)}")
    problem = text_problem(note)
    if problem:
        raise BadNote(f"note: {problem}")
    return note.strip() or None


def draft_content(store: Any) -> tuple[dict, int]:
    """The draft's content (as a publication holds it) and the KB revision it is at."""
    snapshot = store.snapshot()
    own = store.catalog.settings(store.kb_name).get("small_talk_answers")
    return snapshot_content(snapshot, own), snapshot.revision


# -- diff ---------------------------------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text or "")


def word_diff(before: str, after: str) -> list[list[str]]:
    """The answer word by word: [["=", "kept "], ["-", "removed "], ["+", "added "]], runs merged."""
    a, b = _words(before), _words(after)
    out: list[list[str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(["=", "".join(a[i1:i2])])
            continue
        if i2 > i1:
            out.append(["-", "".join(a[i1:i2])])
        if j2 > j1:
            out.append(["+", "".join(b[j1:j2])])
    return out


def _faq_change(faq_id: str, old: dict, new: dict) -> dict | None:
    change: dict[str, Any] = {"faq_id": faq_id}
    old_q = [q for _, q in old.get("phrasings") or []]
    new_q = [q for _, q in new.get("phrasings") or []]
    added = [q for q in new_q if q not in set(old_q)]
    removed = [q for q in old_q if q not in set(new_q)]
    if added or removed:
        change["phrasings"] = {"added": added, "removed": removed}
    if old.get("answer") != new.get("answer"):
        change["answer"] = {"before": old.get("answer"), "after": new.get("answer"),
                            "words": word_diff(old.get("answer") or "", new.get("answer") or "")}
    fields = {f: {"before": old.get(f), "after": new.get(f)} for f in FIELDS if old.get(f) != new.get(f)}
    if fields:
        change["fields"] = fields
    return change if len(change) > 1 else None


def diff(before: dict | None, after: dict) -> dict:
    """What changed from content `before` (None: an empty KB) to `after`."""
    old, new = (before or {}).get("faqs", {}), after.get("faqs", {})
    changed = [c for f in sorted(set(old) & set(new)) if (c := _faq_change(f, old[f], new[f])) is not None]
    out = {"added": [{"faq_id": f, "answer": new[f].get("answer"),
                      "phrasings": [q for _, q in new[f].get("phrasings") or []]} for f in sorted(set(new) - set(old))],
           "removed": [{"faq_id": f, "answer": old[f].get("answer"),
                        "phrasings": [q for _, q in old[f].get("phrasings") or []]} for f in sorted(set(old) - set(new))],
           "changed": changed, "small_talk_answers": None}
    if (before or {}).get("small_talk_answers") != after.get("small_talk_answers"):
        out["small_talk_answers"] = {"before": (before or {}).get("small_talk_answers"),
                                     "after": after.get("small_talk_answers")}
    return out


def summary(changes: dict, content: dict) -> dict:
    """A publication's change summary: counts of what `diff` found, and the size of what was published."""
    faqs = content.get("faqs", {})
    return {"added": len(changes["added"]), "removed": len(changes["removed"]), "changed": len(changes["changed"]),
            "small_talk_answers": changes["small_talk_answers"] is not None, "faqs": len(faqs),
            "phrasings": sum(len(f.get("phrasings") or []) for f in faqs.values())}


def content_of(store: Any, which: str | int | None) -> dict:
    """The content `which` names: "draft", a publication id, or None (the latest publication; an empty KB when
    there is none). Raises PublicationNotFound."""
    if which == DRAFT:
        return draft_content(store)[0]
    if which is None:
        latest = store.publications.latest()
        return latest.content if latest is not None else {"faqs": {}, "small_talk_answers": None}
    return publication(store, which).content


def publication(store: Any, which: Any) -> PublicationRow:
    """The KB's publication `which` names: its number in ASCII digits (int('٣') would be 3, and '²' no number
    at all: neither names one). Raises PublicationNotFound."""
    text = str(which).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_NUMBER_DIGITS):
        raise PublicationNotFound(store.kb_name, which)
    row = store.publications.get(int(text))
    if row is None:
        raise PublicationNotFound(store.kb_name, which)
    return row


def diff_of(store: Any, start: str | int | None = None, end: str | int | None = DRAFT) -> dict:
    """`diff` between two named contents (default: the latest publication -> the draft)."""
    before, after = content_of(store, start), content_of(store, end)
    return {"from": "latest" if start is None else str(start), "to": str(end), **diff(before, after)}


# -- publish, roll back -----------------------------------------------------------------------------------
@dataclass
class Published:
    publication: PublicationRow
    changes: dict


def publish(store: Any, note: str | None = None, *,
            gate: Callable[[dict | None, dict], Any] | None = None, force: bool = False) -> Published:
    """Snapshot the draft as the KB's next publication. `gate(before, after)` (contents) returns the labels'
    verdict (`.passed`) or None; a failed one refuses unless `force`. Raises NothingToPublish, PublishConflict,
    GateRefused, BadNote."""
    note = check_note(note)
    latest = store.publications.latest()
    content, revision = draft_content(store)
    if latest is not None and latest.content == content:
        raise NothingToPublish(latest.id)
    if gate is not None:
        verdict = gate(latest.content if latest is not None else None, content)
        if verdict is not None and not verdict.passed and not force:
            raise GateRefused(verdict)
    changes = diff(latest.content if latest is not None else None, content)
    return Published(_add(store, content, revision, summary(changes, content), latest, note, "publish"), changes)


def rollback(store: Any, to: Any, note: str | None = None, *, reviewed: bool) -> Published:
    """Serve publication `to`'s content on production again, as the KB's next publication (kind "rollback");
    the draft is left as it is. `reviewed`: the KB's publishing is (its effective setting). Raises NotReviewed,
    PublicationNotFound, NothingToPublish, PublishConflict."""
    note = check_note(note)
    if not reviewed:
        raise NotReviewed(store.kb_name)
    target = publication(store, to)
    latest = store.publications.latest()
    if latest is not None and latest.content == target.content:
        raise NothingToPublish(latest.id)
    changes = diff(latest.content if latest is not None else None, target.content)
    row = _add(store, target.content, target.revision, summary(changes, target.content), latest, note, "rollback",
               restored=target.id)
    return Published(row, changes)


def _add(store: Any, content: dict, revision: int, counts: dict, latest: PublicationRow | None, note: str | None,
         kind: str, restored: int | None = None) -> PublicationRow:
    actor = current_actor()

    def audited(conn: Any, row: PublicationRow) -> None:
        store.audit.record(kind, None, before={"publication": latest.id if latest is not None else None},
                           after={"publication": row.id, "restored": restored, "note": note, "summary": counts},
                           conn=conn, actor=actor)

    row = store.publications.add(content, revision, counts, kind=kind, restored=restored, actor=actor.name,
                                 note=note, expected_latest=latest.id if latest is not None else None,
                                 on_added=audited)
    if row is None:
        raise PublishConflict()
    return row


def start_reviewing(store: Any) -> PublicationRow | None:
    """When a KB turns to `publishing=reviewed` (`faq kb settings`, or the service finding a reviewed KB with
    nothing published): its content as users get it now becomes its next publication, so production keeps
    answering exactly that. None when it is the latest publication already."""
    try:
        return publish(store, "publishing set to reviewed").publication
    except NothingToPublish:
        return None
