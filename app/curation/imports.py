"""What an import keeps beside a KB's FAQs, for every front end (`faq kb import`, the console's import):
the file's synonyms (merged into the KB's; with `sync`, a file's own replace them) and default answer as KB settings, and its
suggested phrasings as proposals of the review queue (app/store/suggestions.py).

`export_contents` is the other way: the KB with what it keeps beside its FAQs, for the exporters.
`settings_problem` checks them against the KB settings' limits before anything is written, so a file whose
synonyms a KB cannot keep imports nothing; `keep_beside` stores them after the FAQs went in.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.curation.mining import suggested_open
from app.settings import KbSettings
from kb.formats import Imported, KbContents
from kb.formats.base import clean_synonyms


def settings_problem(imported: Imported) -> str | None:
    """Why the file's synonyms or default answer cannot be the KB's settings, or None."""
    try:
        KbSettings(synonyms=imported.synonyms or None, default_answer=imported.default_answer)
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return None


def file_sha256(path: str | Path) -> str | None:
    """The SHA-256 of an imported file, for its audit row; of a folder (a Rasa project), over its files' relative
    paths and bytes in path order; None for stdin ('-'), which cannot be read twice."""
    if str(path) == "-":
        return None
    path = Path(path)
    digest = hashlib.sha256()
    if not path.is_dir():
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode("utf-8", "surrogateescape") + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def distinct_groups(groups: list[list[str]]) -> list[list[str]]:
    """Groups in order, a group holding the same terms (any case) as an earlier one left out."""
    seen: set[frozenset[str]] = set()
    out = []
    for g in groups:
        key = frozenset(t.lower() for t in g)
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


def keep_beside(store: Any, kb: str, imported: Imported, sync: bool, dry_run: bool) -> dict[str, Any]:
    """Store the file's synonyms, default answer and suggested phrasings for KB `kb` (nothing with `dry_run`).
    Returns the counts an import report shows."""
    settings = store.catalog.settings(kb)
    # with sync a file's synonyms replace the KB's; a file without any (a TSV) leaves them as they are
    have = distinct_groups(clean_synonyms([] if sync and imported.synonyms else list(settings.get("synonyms") or [])))
    merged = distinct_groups(clean_synonyms(have + imported.synonyms))
    wanted = dict(settings)
    if merged != (settings.get("synonyms") or []):
        if merged:
            wanted["synonyms"] = merged
        else:
            wanted.pop("synonyms", None)
    if imported.default_answer is not None:
        wanted["default_answer"] = imported.default_answer
    changed = wanted != settings
    if changed and not dry_run:
        store.catalog.set_settings(kb, KbSettings.model_validate(wanted).model_dump(exclude_none=True))
    added = store.suggestions.add(imported.suggestions, imported.format, dry_run=dry_run)
    return {"synonyms_added": max(len(merged) - len(have), 0), "synonym_groups": len(merged),
            "suggestions_added": added, "default_answer": imported.default_answer is not None,
            "settings_changed": changed}


def export_contents(store: Any, kb: str) -> KbContents:
    """The KB and what it keeps beside its FAQs, as the exporters take it: its synonyms and default answer,
    and the suggested phrasings still proposed (not accepted, not dismissed)."""
    settings = store.catalog.settings(kb)
    dismissed = store.reviews.dismissed_keys("phrasing")
    suggestions = [(s.faq_id, s.question) for s in suggested_open(store) if s.key not in dismissed]
    return KbContents(records=list(store.export_records()), synonyms=list(settings.get("synonyms") or []),
                      suggestions=suggestions, default_answer=settings.get("default_answer"))
