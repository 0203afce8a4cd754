"""FaqStore: the one gateway to the database (KB, index build records, query log).

Used by the FastAPI service, the CLI and the index builder. Contract: docs/architecture.md ("Store").

Concurrency: every KB mutation runs in one transaction that starts by touching the kb_meta revision
row, which takes SQLite's write lock (waiting up to busy_timeout) / PostgreSQL's row lock. KB writers
are therefore serialised, and the revision is bumped in the same transaction as the change it marks.
Readers that need a consistent view (snapshot, export, stats) run in one snapshot transaction.

Text that no database can hold (kb.records.text_problem: NUL, lone surrogates) never reaches a
statement: KB writes reject it (KbValidationError), lookups by such a key find nothing, and the query
log drops only the rows that carry it.
"""
from __future__ import annotations

import json
import logging
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection, Engine, Text, and_, bindparam, delete, exists, false, func, insert, or_, select, text, type_coerce,
    update,
)
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError

from app.db.models import SCHEMA_REVISION, Faq, IndexBuild, KbMeta, QueryLog, QuestionVariant, utcnow
from app.db.session import make_engine
from kb.records import (
    FaqSpec,
    KbRecord,
    KbValidationError,
    check_faq,
    check_record,
    group_records,
    text_problem,
)

__all__ = [
    "FaqExists", "FaqNotFound", "FaqOut", "FaqStore", "FeedbackAlreadyRecorded", "FeedbackSessionMismatch",
    "ImportReport", "KbRecord", "KbSnapshot", "KbValidationError", "SchemaNotReady", "VariantRow",
]

log = logging.getLogger(__name__)

REVISION_KEY = "revision"
# bound parameters per IN (...) list: stays under SQLite's variable limit
_CHUNK = 500

faqs_t = Faq.__table__
variants_t = QuestionVariant.__table__
builds_t = IndexBuild.__table__
qlog_t = QueryLog.__table__
meta_t = KbMeta.__table__


class SchemaNotReady(RuntimeError):
    """The database is not at the schema revision this code needs (run `faq db upgrade`)."""


class FaqExists(Exception):
    """create_faq() with a faq_id that is already taken."""


class FaqNotFound(Exception):
    """update_faq() of a faq_id that does not exist."""


class FeedbackAlreadyRecorded(Exception):
    """record_feedback() for a request whose feedback is already there: feedback is written once."""


class FeedbackSessionMismatch(Exception):
    """record_feedback() with a session_id other than the logged query's (or none, when one is required)."""


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


@dataclass(frozen=True)
class FaqOut:
    faq_id: str
    answer: str
    tags: list[str]
    questions: list[str]  # in variant_id order
    created_at: datetime
    updated_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ImportReport:
    """What an import did (or, with dry_run, would do). An FAQ counts as updated when its answer,
    tags or question set changed; deleting an FAQ (sync) also counts its variants as removed."""

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


#: query-log rows deleted per transaction by prune_query_log
PRUNE_CHUNK = 5000


@dataclass(frozen=True)
class PruneResult:
    deleted: int
    chunks: int
    done: bool  # False: stopped at max_seconds with old rows left


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything stored is UTC, so make that explicit."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _chunks(items: list, size: int = _CHUNK) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _storable(*texts: str | None) -> bool:
    return all(t is None or text_problem(t) is None for t in texts)


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class FaqStore:
    def __init__(self, url_or_engine: str | Engine):
        """Connect to an existing database; tables are created by migrations (see from_settings)."""
        if isinstance(url_or_engine, Engine):
            self.engine = url_or_engine
            self._owns_engine = False
        else:
            self.engine = make_engine(str(url_or_engine))
            self._owns_engine = True
        self.log_rows_dropped = 0  # query-log rows log_queries could not store, since this store was opened

    @classmethod
    def from_settings(cls, settings: Any = None) -> "FaqStore":
        """Connect to the configured database (creating data_dir) and check that its schema is the one
        this code expects. Migrations are the entry points' job (`faq db upgrade`, `faq serve`, the
        Docker entrypoint), never a side effect of opening a store."""
        from app.settings import get_settings

        settings = settings or get_settings()
        Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
        store = cls(settings.db_url)
        try:
            store.check_schema()
        except SchemaNotReady:
            store.close()
            raise
        return store

    def check_schema(self) -> None:
        """Raise SchemaNotReady unless the database is at SCHEMA_REVISION."""
        from sqlalchemy import inspect

        found = None
        if inspect(self.engine).has_table("alembic_version"):
            with self.engine.connect() as conn:
                found = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        if found != SCHEMA_REVISION:
            url = self.engine.url.render_as_string(hide_password=True)
            state = "has no schema yet" if found is None else f"is at schema revision {found}"
            raise SchemaNotReady(f"the database {url} {state}, this version needs {SCHEMA_REVISION}: run `faq db upgrade`")

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> "FaqStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FaqStore({self.engine.url.render_as_string(hide_password=True)!r})"

    # ------------------------------------------------------------ transactions

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read transaction seeing one consistent state of the database."""
        with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A KB write transaction, serialised against other KB writers (see module docstring).

        Commits on normal exit unless the body already rolled back; rolls back on an exception.
        """
        with self.engine.connect() as conn:
            # A no-op write as the first statement: takes the lock before anything is read.
            conn.execute(update(meta_t).where(meta_t.c.key == REVISION_KEY).values(value=meta_t.c.value))
            yield conn
            if conn.in_transaction():
                conn.commit()

    @staticmethod
    def _bump_revision(conn: Connection) -> int:
        result = conn.execute(
            update(meta_t).where(meta_t.c.key == REVISION_KEY).values(value=meta_t.c.value + 1)
        )
        if result.rowcount == 0:  # database created without the migration's seed row
            conn.execute(insert(meta_t).values(key=REVISION_KEY, value=1))
        return FaqStore._revision(conn)

    @staticmethod
    def _revision(conn: Connection) -> int:
        value = conn.execute(select(meta_t.c.value).where(meta_t.c.key == REVISION_KEY)).scalar()
        return int(value or 0)

    # ------------------------------------------------------------ KB import / export

    @staticmethod
    def _validate_import(records: Iterable[KbRecord]) -> dict[str, FaqSpec]:
        """Same checks as read_kb (kb_io.check_record + group_records); raises KbValidationError."""
        errors: list[str] = []
        located: list[tuple[str, KbRecord]] = []
        bad_faq_ids: set[str] = set()
        for i, raw in enumerate(records, start=1):
            record, problems = check_record(raw.faq_id, raw.question, raw.answer, raw.tags)
            if record is None:
                errors.extend(f"record {i}: {p}" for p in problems)
                if isinstance(raw.faq_id, str):
                    bad_faq_ids.add(raw.faq_id.strip())
            else:
                located.append((f"record {i}", record))
        specs, group_problems = group_records(located, skip_missing_answer=bad_faq_ids)
        errors.extend(f"{loc}: {reason}" for loc, reason in group_problems)
        if errors:
            raise KbValidationError(errors)
        return specs

    def import_records(self, records: Iterable[KbRecord], sync: bool = False, dry_run: bool = False) -> ImportReport:
        """Upsert FAQs and their variants in one transaction; see ImportReport for what is counted.

        Each FAQ in `records` gets the answer and tags given there (tags default to []); its variants
        are added when missing. With `sync`, variants of those FAQs that are not in `records` and FAQs
        not in `records` at all are deleted. With `dry_run`, the transaction is rolled back.
        Validation happens before any write: invalid input raises KbValidationError and changes nothing.
        Re-importing the same records changes nothing and leaves the revision alone.
        """
        specs = self._validate_import(records)
        report = ImportReport(sync=sync, dry_run=dry_run)
        now = utcnow()
        with self._write() as conn:
            report.revision_before = report.revision = self._revision(conn)
            existing = self._load_faqs(conn)
            have: dict[str, dict[str, int]] = {}  # faq_id -> {question: variant id}
            for vid, faq_id, question in conn.execute(
                select(variants_t.c.id, variants_t.c.faq_id, variants_t.c.question)
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
                    {"faq_id": faq_id, "question": q, "created_at": now, "updated_at": now} for q in added
                )
                removed_variant_ids.extend(removed)
                current = existing.get(faq_id)
                if current is None:
                    report.faqs_created += 1
                    new_faqs.append({"faq_id": faq_id, "answer": spec.answer, "tags": spec.tags,
                                     "created_at": now, "updated_at": now})
                elif current != (spec.answer, spec.tags) or added or removed:
                    report.faqs_updated += 1
                    changed_faqs.append({"key": faq_id, "answer": spec.answer, "tags": spec.tags, "updated_at": now})
                else:
                    report.faqs_unchanged += 1
            deleted_faq_ids = [f for f in existing if f not in specs] if sync else []
            report.faqs_deleted = len(deleted_faq_ids)
            report.variants_removed += sum(len(have.get(f, {})) for f in deleted_faq_ids)

            if report.changes:
                self._apply_import(conn, new_faqs, changed_faqs, new_variants, removed_variant_ids, deleted_faq_ids)
                report.revision = self._bump_revision(conn)
            if dry_run:
                conn.rollback()
        return report

    @staticmethod
    def _apply_import(conn: Connection, new_faqs: list[dict], changed_faqs: list[dict], new_variants: list[dict],
                      removed_variant_ids: list[int], deleted_faq_ids: list[str]) -> None:
        """Bulk statements only: a handful of executemany calls however large the import."""
        for chunk in _chunks(deleted_faq_ids):  # variants go with them (ON DELETE CASCADE)
            conn.execute(delete(faqs_t).where(faqs_t.c.faq_id.in_(chunk)))
        for chunk in _chunks(removed_variant_ids):
            conn.execute(delete(variants_t).where(variants_t.c.id.in_(chunk)))
        if new_faqs:
            conn.execute(insert(faqs_t), new_faqs)
        if changed_faqs:
            # executemany UPDATE: the SET clause comes from the parameter keys
            conn.execute(update(faqs_t).where(faqs_t.c.faq_id == bindparam("key")), changed_faqs)
        if new_variants:
            conn.execute(insert(variants_t), new_variants)

    @staticmethod
    def _load_faqs(conn: Connection) -> dict[str, tuple[str, list[str]]]:
        """faq_id -> (answer, tags). Speed matters here (100k-row KBs are re-read on every change):
        rows are fetched in one go and tags decoded with json.loads directly, skipping SQLAlchemy's
        per-value JSON processor (psycopg2 already returns them decoded)."""
        rows = conn.execute(
            select(faqs_t.c.faq_id, faqs_t.c.answer, type_coerce(faqs_t.c.tags, Text))
        ).all()
        loads = json.loads
        return {faq_id: (answer, tags if isinstance(tags, list) else loads(tags) if tags else [])
                for faq_id, answer, tags in rows}

    def _load_kb(self, conn: Connection) -> tuple[dict[str, tuple[str, list[str]]], list[VariantRow]]:
        faqs = self._load_faqs(conn)
        rows = conn.execute(
            select(variants_t.c.id, variants_t.c.faq_id, variants_t.c.question).order_by(variants_t.c.id)
        ).all()
        return faqs, [VariantRow(vid, faq_id, question) for vid, faq_id, question in rows]

    def export_records(self) -> Iterator[KbRecord]:
        """Every variant with its FAQ's answer and tags: FAQs in order of their first variant,
        variants in id order (so an exported file re-imports in the same order)."""
        with self._read() as conn:
            faqs, variants = self._load_kb(conn)
        by_faq: dict[str, list[str]] = {}
        for v in variants:
            by_faq.setdefault(v.faq_id, []).append(v.question)
        for faq_id, questions in by_faq.items():
            answer, tags = faqs[faq_id]
            for question in questions:
                yield KbRecord(faq_id=faq_id, question=question, answer=answer, tags=list(tags))

    def snapshot(self) -> KbSnapshot:
        with self._read() as conn:
            revision = self._revision(conn)
            faqs, variants = self._load_kb(conn)
        return KbSnapshot(revision=revision, variants=variants, faqs=faqs)

    def revision(self) -> int:
        with self.engine.connect() as conn:
            return self._revision(conn)

    def stats(self) -> dict[str, Any]:
        """KB summary; JSON-serialisable (timestamps as ISO strings)."""
        with self._read() as conn:
            revision = self._revision(conn)
            faq_tags = conn.execute(select(faqs_t.c.faq_id, faqs_t.c.tags)).all()
            per_faq = dict(conn.execute(
                select(variants_t.c.faq_id, func.count()).group_by(variants_t.c.faq_id)
            ).all())
            last = conn.execute(select(builds_t).order_by(builds_t.c.id.desc()).limit(1)).first()
        counts = [per_faq.get(faq_id, 0) for faq_id, _ in faq_tags]
        tag_counts = Counter(tag for _, tags in faq_tags for tag in (tags or []))
        return {
            "faqs": len(faq_tags),
            "variants": sum(counts),
            "variants_per_faq": (
                {"min": min(counts), "median": statistics.median(counts), "max": max(counts)} if counts else None
            ),
            "faqs_without_variants": sum(1 for c in counts if c == 0),
            "tags": len(tag_counts),
            "top_tags": tag_counts.most_common(10),
            "revision": revision,
            "last_build": self._build_dict(last, iso=True) if last is not None else None,
        }

    # ------------------------------------------------------------ CRUD (admin API)

    def _faq_outs(self, conn: Connection, faq_rows: list[Any]) -> list[FaqOut]:
        ids = [row.faq_id for row in faq_rows]
        questions: dict[str, list[str]] = {faq_id: [] for faq_id in ids}
        for chunk in _chunks(ids):
            for faq_id, question in conn.execute(
                select(variants_t.c.faq_id, variants_t.c.question)
                .where(variants_t.c.faq_id.in_(chunk))
                .order_by(variants_t.c.id)
            ):
                questions[faq_id].append(question)
        return [
            FaqOut(faq_id=row.faq_id, answer=row.answer, tags=list(row.tags or []), questions=questions[row.faq_id],
                   created_at=_utc(row.created_at), updated_at=_utc(row.updated_at))
            for row in faq_rows
        ]

    @staticmethod
    def _search_filter(q: str | None) -> Any:
        if not q:
            return None
        if not _storable(q):  # stored text never contains it (and PostgreSQL refuses to compare with it)
            return false()
        pattern = _like_pattern(q)
        return or_(
            faqs_t.c.faq_id.ilike(pattern, escape="\\"),
            faqs_t.c.answer.ilike(pattern, escape="\\"),
            exists().where(and_(variants_t.c.faq_id == faqs_t.c.faq_id,
                                variants_t.c.question.ilike(pattern, escape="\\"))),
        )

    def list_faqs(self, offset: int = 0, limit: int = 50, q: str | None = None) -> list[FaqOut]:
        """FAQs ordered by faq_id; `q` keeps those whose id, answer or a question contains it (any case)."""
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must be >= 0")
        stmt = select(faqs_t).order_by(faqs_t.c.faq_id).offset(offset).limit(limit)
        condition = self._search_filter(q)
        if condition is not None:
            stmt = stmt.where(condition)
        with self._read() as conn:
            return self._faq_outs(conn, conn.execute(stmt).all())

    def count_faqs(self, q: str | None = None) -> int:
        stmt = select(func.count()).select_from(faqs_t)
        condition = self._search_filter(q)
        if condition is not None:
            stmt = stmt.where(condition)
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def get_faq(self, faq_id: str) -> FaqOut | None:
        if not _storable(faq_id):
            return None
        with self._read() as conn:
            return self._get(conn, faq_id)

    def _get(self, conn: Connection, faq_id: str) -> FaqOut | None:
        row = conn.execute(select(faqs_t).where(faqs_t.c.faq_id == faq_id)).first()
        return self._faq_outs(conn, [row])[0] if row is not None else None

    def create_faq(self, faq_id: str, answer: str, questions: Iterable[str], tags: Iterable[str] = ()) -> FaqOut:
        """Raises FaqExists, or KbValidationError for invalid fields (same rules as KB files)."""
        faq_id, answer, questions, tags = check_faq(faq_id, answer, questions, list(tags or ()))
        now = utcnow()
        with self._write() as conn:
            if conn.execute(select(faqs_t.c.faq_id).where(faqs_t.c.faq_id == faq_id)).first() is not None:
                raise FaqExists(f"FAQ {faq_id!r} already exists")
            try:
                conn.execute(insert(faqs_t).values(faq_id=faq_id, answer=answer, tags=tags,
                                                   created_at=now, updated_at=now))
            except IntegrityError as exc:  # only reachable if someone bypasses the store's lock
                raise FaqExists(f"FAQ {faq_id!r} already exists") from exc
            conn.execute(insert(variants_t), [
                {"faq_id": faq_id, "question": q, "created_at": now, "updated_at": now} for q in questions
            ])
            self._bump_revision(conn)
            return self._get(conn, faq_id)

    def update_faq(self, faq_id: str, answer: str | None = None, questions: Iterable[str] | None = None,
                   tags: Iterable[str] | None = None) -> FaqOut:
        """Change the given fields (None: keep). `questions` replaces the whole set; variants that stay
        keep their ids (so the index need not re-encode them). Raises FaqNotFound / KbValidationError.
        The revision is bumped only when something actually changed."""
        faq_id, answer, questions, tags = check_faq(
            faq_id, answer, None if questions is None else list(questions),
            None if tags is None else list(tags), partial=True,
        )
        now = utcnow()
        with self._write() as conn:
            row = conn.execute(select(faqs_t).where(faqs_t.c.faq_id == faq_id)).first()
            if row is None:
                raise FaqNotFound(f"FAQ {faq_id!r} does not exist")
            changes: dict[str, Any] = {}
            if answer is not None and answer != row.answer:
                changes["answer"] = answer
            if tags is not None and tags != list(row.tags or []):
                changes["tags"] = tags
            variants_changed = False
            if questions is not None:
                current = {q: vid for vid, q in conn.execute(
                    select(variants_t.c.id, variants_t.c.question).where(variants_t.c.faq_id == faq_id))}
                removed = [vid for q, vid in current.items() if q not in set(questions)]
                added = [q for q in questions if q not in current]
                for chunk in _chunks(removed):
                    conn.execute(delete(variants_t).where(variants_t.c.id.in_(chunk)))
                if added:
                    conn.execute(insert(variants_t), [
                        {"faq_id": faq_id, "question": q, "created_at": now, "updated_at": now} for q in added
                    ])
                variants_changed = bool(removed or added)
            if changes or variants_changed:
                conn.execute(update(faqs_t).where(faqs_t.c.faq_id == faq_id).values(updated_at=now, **changes))
                self._bump_revision(conn)
            return self._get(conn, faq_id)

    def faq_exists(self, faq_id: str) -> bool:
        if not _storable(faq_id):
            return False
        with self.engine.connect() as conn:
            return conn.execute(select(faqs_t.c.faq_id).where(faqs_t.c.faq_id == faq_id)).first() is not None

    def delete_faq(self, faq_id: str) -> bool:
        """Delete an FAQ and its variants; False when it did not exist."""
        if not _storable(faq_id):
            return False
        with self._write() as conn:
            deleted = conn.execute(delete(faqs_t).where(faqs_t.c.faq_id == faq_id)).rowcount > 0
            if deleted:
                self._bump_revision(conn)
            return deleted

    # ------------------------------------------------------------ index builds

    _BUILD_FIELDS = frozenset(c.name for c in builds_t.columns) - {"id"}

    def _check_build_fields(self, fields: dict[str, Any]) -> None:
        unknown = set(fields) - self._BUILD_FIELDS
        if unknown:
            raise ValueError(f"unknown index build field(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(self._BUILD_FIELDS))}")

    def record_build(self, **fields: Any) -> None:
        """Insert an index_builds row; needs version and encoder_id (status defaults to "building")."""
        self._check_build_fields(fields)
        missing = [f for f in ("version", "encoder_id") if fields.get(f) is None]
        if missing:
            raise ValueError(f"record_build needs {', '.join(missing)}")
        fields.setdefault("status", "building")
        fields.setdefault("started_at", utcnow())
        with self.engine.begin() as conn:
            conn.execute(insert(builds_t).values(**fields))

    def update_build(self, version: str, **fields: Any) -> None:
        """Update the build `version`; raises KeyError when there is none."""
        self._check_build_fields(fields)
        if not fields:
            return
        with self.engine.begin() as conn:
            if conn.execute(update(builds_t).where(builds_t.c.version == version).values(**fields)).rowcount == 0:
                raise KeyError(f"no index build with version {version!r}")

    @staticmethod
    def _build_dict(row: Any, iso: bool = False) -> dict[str, Any]:
        out = dict(row._mapping)
        for key in ("started_at", "finished_at"):
            out[key] = _utc(out[key])
            if iso and out[key] is not None:
                out[key] = out[key].isoformat()
        return out

    def list_builds(self, status: str | None = None) -> list[dict[str, Any]]:
        """All index builds (or those with `status`), newest first (timestamps as aware UTC datetimes)."""
        stmt = select(builds_t).order_by(builds_t.c.id.desc())
        if status is not None:
            stmt = stmt.where(builds_t.c.status == status)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [self._build_dict(r) for r in rows]

    def fail_build_if_building(self, version: str, error: str) -> bool:
        """Mark the build `version` failed with `error`, only if it is still "building" (a sweep must not
        overwrite the outcome of a build that finished meanwhile); True if it was changed."""
        with self.engine.begin() as conn:
            result = conn.execute(
                update(builds_t).where(builds_t.c.version == version, builds_t.c.status == "building")
                .values(status="failed", finished_at=utcnow(), error=error[:2000])
            )
            return result.rowcount > 0

    # ------------------------------------------------------------ query log retention

    def count_query_log_before(self, cutoff: datetime) -> int:
        """Query-log rows created before `cutoff`."""
        with self.engine.connect() as conn:
            return int(conn.execute(
                select(func.count()).select_from(qlog_t).where(qlog_t.c.created_at < _utc(cutoff))
            ).scalar() or 0)

    def prune_query_log(self, cutoff: datetime, *, chunk_size: int = PRUNE_CHUNK, max_seconds: float | None = None,
                        progress: Any = None) -> PruneResult:
        """Delete query-log rows created before `cutoff`, `chunk_size` rows per transaction, so writers
        (the service's log writer) wait at most one chunk for the lock, never the whole prune.
        `max_seconds`: stop after the chunk that passes it (`done` False: call again to go on).
        `progress(deleted_so_far)` is called after every chunk."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        cutoff = _utc(cutoff)
        # ids picked through the created_at index; a subquery keeps the bound parameters at two
        old_ids = select(qlog_t.c.id).where(qlog_t.c.created_at < cutoff).limit(chunk_size)
        started = time.monotonic()
        deleted = chunks = 0
        while True:
            with self.engine.begin() as conn:
                n = conn.execute(delete(qlog_t).where(qlog_t.c.id.in_(old_ids))).rowcount
            deleted += n
            chunks += 1
            if progress is not None and n:
                progress(deleted)
            if n < chunk_size:
                return PruneResult(deleted=deleted, chunks=chunks, done=True)
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                return PruneResult(deleted=deleted, chunks=chunks, done=False)

    # ------------------------------------------------------------ query log

    _LOG_FIELDS = tuple(c.name for c in qlog_t.columns if c.name != "id")

    _LOG_TEXT_FIELDS = tuple(c.name for c in qlog_t.columns if c.name != "id" and c.type.python_type is str)

    def log_queries(self, rows: list[dict[str, Any]]) -> int:
        """Insert query-log rows (keys: query_log columns; created_at defaults to now); returns how many
        were dropped. A bad row never costs the others: rows with text no database can hold are dropped
        up front, and when the one-statement insert still fails on the data (a duplicate request_id, a
        value the column refuses), the rows are inserted one by one and only the failing ones dropped.
        Connection problems raise (nothing is written then). `log_rows_dropped` counts drops since start.
        Raises ValueError for unknown fields (a caller bug)."""
        if not rows:
            return 0
        now = utcnow()
        params = []
        unstorable: list[str] = []
        for i, row in enumerate(rows):
            unknown = set(row) - set(self._LOG_FIELDS)
            if unknown:
                raise ValueError(f"query log row {i}: unknown field(s) {', '.join(sorted(unknown))}")
            bad = [name for name in self._LOG_TEXT_FIELDS
                   if isinstance(row.get(name), str) and text_problem(row[name]) is not None]
            if bad:
                unstorable.append(f"{row.get('request_id')!a} ({', '.join(bad)})")
                continue
            # executemany needs the same keys in every row
            full = {name: row.get(name) for name in self._LOG_FIELDS}
            if full["created_at"] is None:
                full["created_at"] = now
            params.append(full)
        if unstorable:
            log.warning("query log: dropped %d row(s) with text no database can hold (NUL or a lone surrogate): %s",
                        len(unstorable), ", ".join(unstorable[:10]))
        dropped = len(unstorable)
        if params:
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(qlog_t), params)
            except (OperationalError, InterfaceError):
                raise  # the database, not the data: row by row would only fail slower
            except Exception as exc:  # noqa: BLE001 - which row is bad is found out below
                log.warning("query log: inserting %d rows at once failed (%s); inserting them one by one",
                            len(params), " ".join(str(exc).split())[:300])
                dropped += self._log_one_by_one(params)
        self.log_rows_dropped += dropped
        return dropped

    def _log_one_by_one(self, params: list[dict[str, Any]]) -> int:
        """Each row in its own transaction; returns how many were dropped (logged once per call)."""
        failed: list[str] = []
        for i, row in enumerate(params):
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(qlog_t), row)
            except (OperationalError, InterfaceError) as exc:
                rest = len(params) - i
                log.error("query log: database unavailable, dropped the last %d of %d rows: %s",
                          rest, len(params), " ".join(str(exc).split())[:300])
                return len(failed) + rest
            except Exception as exc:  # noqa: BLE001 - drop this row only
                failed.append(f"{row.get('request_id')!a}: {' '.join(str(exc).split())[:200]}")
        if failed:
            log.warning("query log: dropped %d of %d rows the database refused: %s",
                        len(failed), len(params), "; ".join(failed[:5]))
        return len(failed)

    def read_query_log(self, since: datetime | None = None, with_feedback: bool = False) -> list[dict[str, Any]]:
        """Logged queries (oldest first, optionally from `since` on; only those with feedback when
        `with_feedback`) with what they were answered and the feedback: keys query, faq_id, score,
        feedback_correct, feedback_faq_id, created_at."""
        stmt = select(qlog_t.c.query, qlog_t.c.faq_id, qlog_t.c.score, qlog_t.c.feedback_correct,
                      qlog_t.c.feedback_faq_id, qlog_t.c.created_at)
        if since is not None:
            stmt = stmt.where(qlog_t.c.created_at >= _utc(since))
        if with_feedback:
            stmt = stmt.where(or_(qlog_t.c.feedback_correct.is_not(None), qlog_t.c.feedback_faq_id.is_not(None)))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt.order_by(qlog_t.c.id))]

    def recent_scores(self, index_version: str, arms: Sequence[str], limit: int) -> list[float]:
        """The best match's score of the latest `limit` queries served from `index_version` on `arms`."""
        stmt = (select(qlog_t.c.score)
                .where(qlog_t.c.index_version == index_version, qlog_t.c.arm.in_(list(arms)), qlog_t.c.score.is_not(None))
                .order_by(qlog_t.c.id.desc()).limit(limit))
        with self.engine.connect() as conn:
            return [float(r[0]) for r in conn.execute(stmt)]

    def record_feedback(self, request_id: str, correct: bool | None, faq_id: str | None,
                        session_id: str | None = None, require_session: bool = False) -> bool:
        """Attach feedback to a logged query, once; False when no query has that request_id.

        One conditional UPDATE decides, so of two concurrent calls exactly one wins. Raises
        FeedbackAlreadyRecorded when the query has feedback already, FeedbackSessionMismatch when the
        query was logged with a session_id and `session_id` differs (or, with `require_session`, is
        missing). Whether `faq_id` names an FAQ is the caller's business (the log outlives FAQs)."""
        if not _storable(request_id, faq_id, session_id):
            return False  # no logged request can have it
        row_is = qlog_t.c.request_id == request_id
        conditions = [row_is, qlog_t.c.feedback_correct.is_(None), qlog_t.c.feedback_faq_id.is_(None)]
        if session_id is not None:
            conditions.append(or_(qlog_t.c.session_id.is_(None), qlog_t.c.session_id == session_id))
        elif require_session:
            conditions.append(qlog_t.c.session_id.is_(None))
        with self.engine.begin() as conn:
            result = conn.execute(
                update(qlog_t).where(and_(*conditions)).values(feedback_correct=correct, feedback_faq_id=faq_id))
            if result.rowcount > 0:
                return True
            # Nothing updated: tell why. A row that no longer matches the WHERE stays that way
            # (feedback is never cleared), so this read cannot contradict the UPDATE.
            row = conn.execute(select(qlog_t.c.session_id, qlog_t.c.feedback_correct, qlog_t.c.feedback_faq_id)
                               .where(row_is)).first()
        if row is None:
            return False
        # the session is checked first: a caller from another session learns nothing about the feedback
        if row.session_id is not None and (session_id != row.session_id if session_id is not None else require_session):
            if session_id is None:
                raise FeedbackSessionMismatch(f"request {request_id} was made in a session: give its session_id")
            raise FeedbackSessionMismatch(f"session_id does not match the session of request {request_id}")
        if row.feedback_correct is not None or row.feedback_faq_id is not None:
            raise FeedbackAlreadyRecorded(f"feedback for request {request_id} was already recorded")
        return False  # logged only after the UPDATE looked: it was not there when the feedback came
