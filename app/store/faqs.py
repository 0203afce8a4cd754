"""The knowledge base: FAQs and their phrasings (question variants), the revision every change bumps,
bulk import/export of KB records, the admin API's CRUD and the snapshot a served index applies.

Every KB mutation runs in one serialised write transaction that bumps the revision with the change
(app/store/base.py) and appends its audit row (app/store/audit.py): one per FAQ created, changed or deleted,
one per import (its counts, not its FAQs). Text that no database can hold (kb.records.text_problem) never reaches a
statement: writes reject it (KbValidationError) and lookups by such a key find nothing.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement, Connection, Row, Text, and_, bindparam, delete, exists, false, func, insert, or_, select,
    type_coerce, update,
)
from sqlalchemy.exc import IntegrityError

from app.db.models import utcnow
from app.store.audit import AuditStore, faq_state, import_details
from app.store.base import (
    StorePart, builds_t, bump_revision, chunks, faqs_t, read_revision, storable, utc, variants_t,
)

from app.store.builds import build_dict
from kb.records import (
    KEEP, FaqDetails, FaqSpec, KbRecord, KbValidationError, check_faq, check_record, follow_up_problems, group_records,
)


def _faqs_of(kb: str) -> ColumnElement[bool]:
    return faqs_t.c.kb == kb


def _variants_of(kb: str) -> ColumnElement[bool]:
    return variants_t.c.kb == kb


class FaqExists(Exception):
    """create_faq() with a faq_id that is already taken."""


class FaqNotFound(Exception):
    """update_faq() of a faq_id that does not exist."""


@dataclass(frozen=True)
class VariantRow:
    variant_id: int
    faq_id: str
    question: str


@dataclass(frozen=True)
class KbSnapshot:
    revision: int
    variants: list[VariantRow]  # ordered by variant_id
    faqs: dict[str, tuple[str, list[str]]]  # faq_id -> (answer, tags)
    details: dict[str, FaqDetails] = field(default_factory=dict)  # faq_id -> metadata, source, follow-ups...


@dataclass(frozen=True)
class FaqOut:
    faq_id: str
    answer: str
    tags: list[str]
    questions: list[str]  # in variant_id order
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, str] = field(default_factory=dict)
    source: str | None = None
    follow_ups: list[dict[str, str]] = field(default_factory=list)
    context_only: bool = False
    answers: dict[str, str] = field(default_factory=dict)  # language code -> the answer in it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ImportReport:
    """What an import did (or, with dry_run, would do). An FAQ counts as updated when its answer,
    tags, metadata, source, follow-ups, context_only, answers per language or question set changed; deleting an FAQ (sync)
    also counts its variants as removed."""

    faqs_created: int = 0
    faqs_updated: int = 0
    faqs_unchanged: int = 0
    faqs_deleted: int = 0
    variants_added: int = 0
    variants_removed: int = 0
    variants_unchanged: int = 0
    revision_before: int = 0
    revision: int = 0
    sync: bool = False
    dry_run: bool = False

    @property
    def changes(self) -> int:
        return (self.faqs_created + self.faqs_updated + self.faqs_deleted
                + self.variants_added + self.variants_removed)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changes": self.changes}


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class KbStore(StorePart):
    @property
    def _audit(self) -> AuditStore:
        return AuditStore(self.engine, self.kb)

    # ------------------------------------------------------------ import / export

    @staticmethod
    def _validate_import(records: Iterable[KbRecord]) -> dict[str, FaqSpec]:
        """Same checks as read_kb (kb_io.check_record + group_records); raises KbValidationError."""
        errors: list[str] = []
        located: list[tuple[str, KbRecord]] = []
        bad_faq_ids: set[str] = set()
        for i, raw in enumerate(records, start=1):
            loc = getattr(raw, "loc", None) or f"record {i}"
            record, problems = check_record(
                raw.faq_id, raw.question, raw.answer, raw.tags, getattr(raw, "metadata", None),
                getattr(raw, "source", None), getattr(raw, "follow_ups", None), getattr(raw, "context_only", None),
                getattr(raw, "answers", None))
            if record is None:
                errors.extend(f"{loc}: {p}" for p in problems)
                if isinstance(raw.faq_id, str):
                    bad_faq_ids.add(raw.faq_id.strip())
            else:
                located.append((loc, record))
        specs, group_problems = group_records(located, skip_missing_answer=bad_faq_ids)
        errors.extend(f"{loc}: {reason}" for loc, reason in group_problems)
        if errors:
            raise KbValidationError(errors)
        return specs

    def import_records(self, records: Iterable[KbRecord], sync: bool = False, dry_run: bool = False) -> ImportReport:
        """Upsert FAQs and their variants in one transaction; see ImportReport for what is counted.

        Each FAQ in `records` gets the answer, tags and FAQ fields given there (kb/records.py defaults);
        its variants are added when missing; every follow-up must name an FAQ of `records` or (without
        `sync`, which deletes the others) of the KB. With `sync`, variants of those FAQs that are not in `records` and FAQs
        not in `records` at all are deleted. With `dry_run`, the transaction is rolled back.
        Validation happens before any write: invalid input raises KbValidationError and changes nothing.
        Re-importing the same records changes nothing and leaves the revision alone.
        """
        specs = self._validate_import(records)
        report = ImportReport(sync=sync, dry_run=dry_run)
        now = utcnow()
        kb = self.kb
        with self.locked_write() as conn:
            report.revision_before = report.revision = read_revision(conn, kb)
            existing = self._load_faqs(conn)
            details = self._load_details(conn)
            dangling = follow_up_problems(specs, () if sync else existing)
            if dangling:
                raise KbValidationError([f"{loc}: {reason}" for loc, reason in dangling])
            have: dict[str, dict[str, int]] = {}  # faq_id -> {question: variant id}
            for vid, faq_id, question in conn.execute(
                select(variants_t.c.id, variants_t.c.faq_id, variants_t.c.question).where(_variants_of(kb))
            ).all():
                have.setdefault(faq_id, {})[question] = vid

            new_faqs: list[dict] = []
            changed_faqs: list[dict] = []
            new_variants: list[dict] = []
            removed_variant_ids: list[int] = []
            for faq_id, spec in specs.items():
                current_questions = have.get(faq_id, {})
                added = [q for q in spec.questions if q not in current_questions]
                removed: list[int] = []
                if sync:
                    wanted = set(spec.questions)
                    removed = [vid for q, vid in current_questions.items() if q not in wanted]
                report.variants_added += len(added)
                report.variants_removed += len(removed)
                report.variants_unchanged += len(spec.questions) - len(added)
                new_variants.extend(
                    {"kb": kb, "faq_id": faq_id, "question": q, "created_at": now, "updated_at": now} for q in added
                )
                removed_variant_ids.extend(removed)
                current = existing.get(faq_id)
                fields = {"answer": spec.answer, "tags": spec.tags, **_detail_columns(spec.details)}
                if current is None:
                    report.faqs_created += 1
                    new_faqs.append({"kb": kb, "faq_id": faq_id, **fields, "created_at": now, "updated_at": now})
                elif (current != (spec.answer, spec.tags) or details.get(faq_id) != spec.details
                      or added or removed):
                    report.faqs_updated += 1
                    changed_faqs.append({"key": faq_id, **fields, "updated_at": now})
                else:
                    report.faqs_unchanged += 1
            deleted_faq_ids = [f for f in existing if f not in specs] if sync else []
            report.faqs_deleted = len(deleted_faq_ids)
            report.variants_removed += sum(len(have.get(f, {})) for f in deleted_faq_ids)

            if report.changes:
                self._apply_import(conn, kb, new_faqs, changed_faqs, new_variants, removed_variant_ids,
                                   deleted_faq_ids)
                report.revision = bump_revision(conn, kb)
            if dry_run:
                conn.rollback()
            else:  # even when nothing changed: that someone imported this file is worth knowing
                source = import_details()
                counts = {k: v for k, v in report.as_dict().items() if k not in ("dry_run", "revision_before")}
                self._audit.record("kb.import", source["file"], before={"revision": report.revision_before},
                                   after={**source, **counts}, conn=conn)
        return report

    @staticmethod
    def _apply_import(conn: Connection, kb: str, new_faqs: list[dict], changed_faqs: list[dict],
                      new_variants: list[dict], removed_variant_ids: list[int], deleted_faq_ids: list[str]) -> None:
        """Bulk statements only: a handful of executemany calls however large the import."""
        for chunk in chunks(deleted_faq_ids):  # variants go with them (ON DELETE CASCADE)
            conn.execute(delete(faqs_t).where(_faqs_of(kb), faqs_t.c.faq_id.in_(chunk)))
        for chunk in chunks(removed_variant_ids):
            conn.execute(delete(variants_t).where(_variants_of(kb), variants_t.c.id.in_(chunk)))
        if new_faqs:
            conn.execute(insert(faqs_t), new_faqs)
        if changed_faqs:
            # executemany UPDATE: the SET clause comes from the parameter keys
            conn.execute(update(faqs_t).where(_faqs_of(kb), faqs_t.c.faq_id == bindparam("key")), changed_faqs)
        if new_variants:
            conn.execute(insert(variants_t), new_variants)

    def _load_faqs(self, conn: Connection) -> dict[str, tuple[str, list[str]]]:
        """faq_id -> (answer, tags). Speed matters here (100k-row KBs are re-read on every change):
        rows are fetched in one go and tags decoded with json.loads directly, skipping SQLAlchemy's
        per-value JSON processor (psycopg2 already returns them decoded)."""
        rows = conn.execute(
            select(faqs_t.c.faq_id, faqs_t.c.answer, type_coerce(faqs_t.c.tags, Text)).where(_faqs_of(self.kb))
        ).all()
        loads = json.loads
        return {faq_id: (answer, tags if isinstance(tags, list) else loads(tags) if tags else [])
                for faq_id, answer, tags in rows}

    def _load_details(self, conn: Connection) -> dict[str, FaqDetails]:
        """faq_id -> its FAQ fields (metadata, source, follow-ups, context_only, answers), decoded as `_load_faqs`
        does."""
        rows = conn.execute(
            select(faqs_t.c.faq_id, type_coerce(faqs_t.c["metadata"], Text), faqs_t.c.source,
                   type_coerce(faqs_t.c.follow_ups, Text), faqs_t.c.context_only,
                   type_coerce(faqs_t.c.answers, Text)).where(_faqs_of(self.kb))
        ).all()
        return {faq_id: _details(meta, source, follow_ups, context_only, answers)
                for faq_id, meta, source, follow_ups, context_only, answers in rows}

    def _load_kb(self, conn: Connection) -> tuple[dict[str, tuple[str, list[str]]], list[VariantRow]]:
        faqs = self._load_faqs(conn)
        rows = conn.execute(
            select(variants_t.c.id, variants_t.c.faq_id, variants_t.c.question)
            .where(_variants_of(self.kb)).order_by(variants_t.c.id)
        ).all()
        return faqs, [VariantRow(vid, faq_id, question) for vid, faq_id, question in rows]

    def export_records(self) -> Iterator[KbRecord]:
        """Every variant with its FAQ's answer, tags and FAQ fields: FAQs in order of their first variant,
        variants in id order (so an exported file re-imports in the same order)."""
        with self._read() as conn:
            faqs, variants = self._load_kb(conn)
            details = self._load_details(conn)
        by_faq: dict[str, list[str]] = {}
        for v in variants:
            by_faq.setdefault(v.faq_id, []).append(v.question)
        for faq_id, questions in by_faq.items():
            answer, tags = faqs[faq_id]
            d = details.get(faq_id) or FaqDetails()
            for question in questions:
                # FAQ fields at their defaults are "not given", as a file without them says
                yield KbRecord(faq_id=faq_id, question=question, answer=answer, tags=list(tags),
                               metadata=dict(d.metadata) or None, source=d.source,
                               follow_ups=[dict(f) for f in d.follow_ups] or None, context_only=d.context_only or None,
                               answers=dict(d.answers) or None)

    def snapshot(self) -> KbSnapshot:
        with self._read() as conn:
            revision = read_revision(conn, self.kb)
            faqs, variants = self._load_kb(conn)
            details = self._load_details(conn)
        return KbSnapshot(revision=revision, variants=variants, faqs=faqs, details=details)

    def revision(self) -> int:
        with self.engine.connect() as conn:
            return read_revision(conn, self.kb)

    def stats(self) -> dict[str, Any]:
        """KB summary; JSON-serialisable (timestamps as ISO strings)."""
        with self._read() as conn:
            revision = read_revision(conn, self.kb)
            faq_tags = conn.execute(select(faqs_t.c.faq_id, faqs_t.c.tags).where(_faqs_of(self.kb))).all()
            per_faq = dict(conn.execute(
                select(variants_t.c.faq_id, func.count()).where(_variants_of(self.kb)).group_by(variants_t.c.faq_id)
            ).all())
            last = conn.execute(select(builds_t).where(builds_t.c.kb == self.kb)
                                .order_by(builds_t.c.id.desc()).limit(1)).first()
        counts = [per_faq.get(faq_id, 0) for faq_id, _ in faq_tags]
        tag_counts = Counter(tag for _, tags in faq_tags for tag in (tags or []))
        return {
            "kb": self.kb,
            "faqs": len(faq_tags),
            "variants": sum(counts),
            "variants_per_faq": (
                {"min": min(counts), "median": statistics.median(counts), "max": max(counts)} if counts else None
            ),
            "faqs_without_variants": sum(1 for c in counts if c == 0),
            "tags": len(tag_counts),
            "top_tags": tag_counts.most_common(10),
            "revision": revision,
            "last_build": build_dict(last, iso=True) if last is not None else None,
        }

    # ------------------------------------------------------------ CRUD (admin API)

    def _faq_outs(self, conn: Connection, faq_rows: list[Row]) -> list[FaqOut]:
        ids = [row.faq_id for row in faq_rows]
        questions: dict[str, list[str]] = {faq_id: [] for faq_id in ids}
        for chunk in chunks(ids):
            for faq_id, question in conn.execute(
                select(variants_t.c.faq_id, variants_t.c.question)
                .where(_variants_of(self.kb), variants_t.c.faq_id.in_(chunk))
                .order_by(variants_t.c.id)
            ):
                questions[faq_id].append(question)
        return [
            FaqOut(faq_id=row.faq_id, answer=row.answer, tags=list(row.tags or []), questions=questions[row.faq_id],
                   created_at=utc(row.created_at), updated_at=utc(row.updated_at),
                   **_row_details(row).as_dict())
            for row in faq_rows
        ]

    def _search_filter(self, q: str | None) -> ColumnElement[bool]:
        if not q:
            return _faqs_of(self.kb)
        if not storable(q):  # stored text never contains it (and PostgreSQL refuses to compare with it)
            return false()
        pattern = _like_pattern(q)
        return and_(_faqs_of(self.kb), or_(
            faqs_t.c.faq_id.ilike(pattern, escape="\\"),
            faqs_t.c.answer.ilike(pattern, escape="\\"),
            exists().where(and_(variants_t.c.kb == faqs_t.c.kb, variants_t.c.faq_id == faqs_t.c.faq_id,
                                variants_t.c.question.ilike(pattern, escape="\\"))),
        ))

    def list_faqs(self, offset: int = 0, limit: int = 50, q: str | None = None) -> list[FaqOut]:
        """FAQs ordered by faq_id; `q` keeps those whose id, answer or a question contains it (any case)."""
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must be >= 0")
        stmt = select(faqs_t).where(self._search_filter(q)).order_by(faqs_t.c.faq_id).offset(offset).limit(limit)
        with self._read() as conn:
            return self._faq_outs(conn, conn.execute(stmt).all())

    def count_faqs(self, q: str | None = None) -> int:
        stmt = select(func.count()).select_from(faqs_t).where(self._search_filter(q))
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def get_faq(self, faq_id: str) -> FaqOut | None:
        if not storable(faq_id):
            return None
        with self._read() as conn:
            return self._get(conn, faq_id)

    def _get(self, conn: Connection, faq_id: str) -> FaqOut | None:
        row = conn.execute(select(faqs_t).where(_faqs_of(self.kb), faqs_t.c.faq_id == faq_id)).first()
        return self._faq_outs(conn, [row])[0] if row is not None else None

    def create_faq(self, faq_id: str, answer: str, questions: Iterable[str], tags: Iterable[str] = (), *,
                   metadata: dict[str, str] | None = None, source: str | None = None,
                   follow_ups: list[dict[str, str]] | None = None, context_only: bool = False,
                   answers: dict[str, str] | None = None) -> FaqOut:
        """Raises FaqExists, or KbValidationError for invalid fields (same rules as KB files; follow-ups must
        name FAQs of the KB)."""
        checked = check_faq(faq_id, answer, questions, list(tags or ()), metadata=metadata, source=source,
                            follow_ups=follow_ups, context_only=context_only, answers=answers)
        faq_id, answer, questions, tags = checked.faq_id, checked.answer, checked.questions, checked.tags
        now = utcnow()
        kb = self.kb
        with self.locked_write() as conn:
            if conn.execute(select(faqs_t.c.faq_id).where(_faqs_of(kb), faqs_t.c.faq_id == faq_id)).first() is not None:
                raise FaqExists(f"FAQ {faq_id!r} already exists")
            self._check_targets(conn, checked.follow_ups)
            details = FaqDetails(checked.metadata, checked.source, checked.follow_ups, checked.context_only,
                                 checked.answers)
            try:
                conn.execute(insert(faqs_t).values(kb=kb, faq_id=faq_id, answer=answer, tags=tags,
                                                   created_at=now, updated_at=now, **_detail_columns(details)))
            except IntegrityError as exc:  # only reachable if someone bypasses the store's lock
                raise FaqExists(f"FAQ {faq_id!r} already exists") from exc
            conn.execute(insert(variants_t), [
                {"kb": kb, "faq_id": faq_id, "question": q, "created_at": now, "updated_at": now} for q in questions
            ])
            bump_revision(conn, kb)
            created = self._get(conn, faq_id)
            self._audit.record("faq.create", faq_id, None, faq_state(created), conn=conn)
            return created

    def update_faq(self, faq_id: str, answer: str | None = None, questions: Iterable[str] | None = None,
                   tags: Iterable[str] | None = None, *, metadata: dict[str, str] | None = None, source: Any = KEEP,
                   follow_ups: list[dict[str, str]] | None = None, context_only: bool | None = None,
                   answers: dict[str, str] | None = None) -> FaqOut:
        """Change the given fields (None, and KEEP for `source` which None clears: keep; `answers` replaces the
        whole set, {} clears it). `questions`
        replaces the whole set; variants that stay keep their ids (so the index need not re-encode them).
        Raises FaqNotFound / KbValidationError. The revision is bumped only when something actually changed."""
        checked = check_faq(
            faq_id, answer, None if questions is None else list(questions),
            None if tags is None else list(tags), metadata=metadata, source=source, follow_ups=follow_ups,
            context_only=context_only, answers=answers, partial=True,
        )
        faq_id, answer, questions, tags = checked.faq_id, checked.answer, checked.questions, checked.tags
        now = utcnow()
        kb = self.kb
        with self.locked_write() as conn:
            row = conn.execute(select(faqs_t).where(_faqs_of(kb), faqs_t.c.faq_id == faq_id)).first()
            if row is None:
                raise FaqNotFound(f"FAQ {faq_id!r} does not exist")
            self._check_targets(conn, checked.follow_ups)
            before = self._faq_outs(conn, [row])[0]
            changes: dict[str, Any] = {}
            if answer is not None and answer != row.answer:
                changes["answer"] = answer
            if tags is not None and tags != list(row.tags or []):
                changes["tags"] = tags
            current = _row_details(row)
            if checked.metadata is not None and checked.metadata != current.metadata:
                changes["metadata"] = checked.metadata
            if checked.source is not KEEP and checked.source != current.source:
                changes["source"] = checked.source
            if checked.follow_ups is not None and checked.follow_ups != current.follow_ups:
                changes["follow_ups"] = checked.follow_ups
            if checked.context_only is not None and checked.context_only != current.context_only:
                changes["context_only"] = checked.context_only
            if checked.answers is not None and checked.answers != current.answers:
                changes["answers"] = checked.answers
            variants_changed = False
            if questions is not None:
                current = {q: vid for vid, q in conn.execute(
                    select(variants_t.c.id, variants_t.c.question).where(_variants_of(kb), variants_t.c.faq_id == faq_id))}
                removed = [vid for q, vid in current.items() if q not in set(questions)]
                added = [q for q in questions if q not in current]
                for chunk in chunks(removed):
                    conn.execute(delete(variants_t).where(variants_t.c.id.in_(chunk)))
                if added:
                    conn.execute(insert(variants_t), [
                        {"kb": kb, "faq_id": faq_id, "question": q, "created_at": now, "updated_at": now} for q in added
                    ])
                variants_changed = bool(removed or added)
            if not (changes or variants_changed):
                return before  # nothing changed: no revision, no audit row
            conn.execute(update(faqs_t).where(_faqs_of(kb), faqs_t.c.faq_id == faq_id)
                         .values(updated_at=now, **changes))
            bump_revision(conn, kb)
            after = self._get(conn, faq_id)
            self._audit.record("faq.update", faq_id, faq_state(before), faq_state(after), conn=conn)
            return after

    def add_questions(self, faq_id: str, questions: Iterable[str], action: str = "faq.update") -> tuple[FaqOut, int]:
        """Add phrasings to an FAQ, keeping its answer, tags and other phrasings: (the FAQ, how many were
        new). Atomic against other writers, so it never undoes an edit made meanwhile (a whole-FAQ
        update built from an earlier read would). Raises FaqNotFound / KbValidationError. `action`: the audit
        row's (review.accept for an accepted proposal); none when every phrasing was there."""
        with self.locked_write() as conn:
            faq = self._get(conn, faq_id) if storable(faq_id) else None
            if faq is None:
                raise FaqNotFound(f"FAQ {faq_id!r} does not exist")
            wanted = list(dict.fromkeys([*faq.questions, *questions]))
            # the same rules as every other way phrasings come in (lengths, text, count)
            wanted = check_faq(faq_id, faq.answer, wanted, list(faq.tags)).questions
            added = [q for q in wanted if q not in set(faq.questions)]
            if not added:
                return faq, 0
            now = utcnow()
            conn.execute(insert(variants_t), [
                {"kb": self.kb, "faq_id": faq_id, "question": q, "created_at": now, "updated_at": now} for q in added])
            conn.execute(update(faqs_t).where(_faqs_of(self.kb), faqs_t.c.faq_id == faq_id).values(updated_at=now))
            bump_revision(conn, self.kb)
            after = self._get(conn, faq_id)
            self._audit.record(action, faq_id, faq_state(faq), faq_state(after), conn=conn)
            return after, len(added)

    def faq_exists(self, faq_id: str) -> bool:
        if not storable(faq_id):
            return False
        with self.engine.connect() as conn:
            return conn.execute(select(faqs_t.c.faq_id).where(_faqs_of(self.kb), faqs_t.c.faq_id == faq_id)
                                ).first() is not None

    def delete_faq(self, faq_id: str) -> bool:
        """Delete an FAQ and its variants, and take it out of the follow-ups of the FAQs that prompt to it (in
        the same transaction, so follow-ups never name a missing FAQ); False when it did not exist."""
        if not storable(faq_id):
            return False
        with self.locked_write() as conn:
            before = self._get(conn, faq_id)
            deleted = conn.execute(delete(faqs_t).where(_faqs_of(self.kb), faqs_t.c.faq_id == faq_id)).rowcount > 0
            if deleted:
                now = utcnow()
                prompting = []
                for other, d in self._load_details(conn).items():
                    kept = [f for f in d.follow_ups if f["faq_id"] != faq_id]
                    if len(kept) != len(d.follow_ups):
                        prompting.append(other)
                        conn.execute(update(faqs_t).where(_faqs_of(self.kb), faqs_t.c.faq_id == other)
                                     .values(follow_ups=kept, updated_at=now))
                bump_revision(conn, self.kb)
                # one row for the deletion: the FAQs it took the follow-up out of are named in it
                state = {**faq_state(before), **({"follow_up_of": sorted(prompting)} if prompting else {})}
                self._audit.record("faq.delete", faq_id, state, None, conn=conn)
            return deleted

    def prompting_to(self, faq_id: str) -> list[str]:
        """The FAQs whose follow-ups name `faq_id` (what deleting it would change), in faq_id order."""
        if not storable(faq_id):
            return []
        with self._read() as conn:
            details = self._load_details(conn)
        return sorted(f for f, d in details.items() if any(x["faq_id"] == faq_id for x in d.follow_ups))

    def _check_targets(self, conn: Connection, follow_ups: list[dict[str, str]] | None) -> None:
        """KbValidationError naming each follow-up whose FAQ is not in the KB."""
        targets = sorted({f["faq_id"] for f in follow_ups or ()})
        if not targets:
            return
        have = {f for (f,) in conn.execute(select(faqs_t.c.faq_id).where(_faqs_of(self.kb),
                                                                         faqs_t.c.faq_id.in_(targets)))}
        missing = [(i, f["faq_id"]) for i, f in enumerate(follow_ups or ()) if f["faq_id"] not in have]
        if missing:
            raise KbValidationError([f"follow_ups[{i}].faq_id {f!r} is not an FAQ of this KB" for i, f in missing])


def _json_value(value: Any, default: Any) -> Any:
    # type_coerce(..., Text) hands SQLite's JSON text through undecoded; psycopg2 already decodes it
    if value is None:
        return default
    return json.loads(value) if isinstance(value, str) else value


def _details(meta: Any, source: str | None, follow_ups: Any, context_only: Any, answers: Any) -> FaqDetails:
    return FaqDetails(metadata=_json_value(meta, {}), source=source, follow_ups=_json_value(follow_ups, []),
                      context_only=bool(context_only), answers=_json_value(answers, {}))


def _row_details(row: Row) -> FaqDetails:
    """The FAQ fields of a whole faqs row (`select(faqs_t)`)."""
    return _details(row._mapping["metadata"], row.source, row.follow_ups, row.context_only, row.answers)


def _detail_columns(details: FaqDetails) -> dict[str, Any]:
    """An FAQ's fields as faqs-table values."""
    return {"metadata": dict(details.metadata), "source": details.source,
            "follow_ups": [dict(f) for f in details.follow_ups], "context_only": details.context_only,
            "answers": dict(details.answers)}
