"""`FaqStore`: the one gateway to the database, composed of one part per concern, scoped to one KB.

A store reads and writes the KB it was opened for (`store.kb_name`, settings `kb`); `store.for_kb(name)`
is the same database scoped to another KB, sharing the engine. `store.catalog` (app/store/catalog.py) is the
catalogue of KBs and their tokens, the same for every scope, as is `store.console_sessions`
(app/store/console_sessions.py: who is signed in to the console).

`store.faqs` (app/store/faqs.py: FAQs, phrasings, revision, import/export), `store.builds`
(app/store/builds.py: index build records), `store.query_log` (app/store/query_log.py: the log,
feedback, retention) and `store.reviews` (app/store/reviews.py: what was dismissed from the review
queues), `store.suggestions` (app/store/suggestions.py: phrasings imported as proposals), `store.publications`
(app/store/publications.py: the published content) and `store.audit` (app/store/audit.py: one row per change)
share one engine. The store's own methods are those parts' methods under the
names callers have always used, so `store.snapshot()` is `store.faqs.snapshot()`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from sqlalchemy import Connection, Engine, inspect, text

from app.db.models import SCHEMA_REVISION
from app.db.session import make_engine
from app.store.base import SchemaNotReady
from app.store.audit import AuditStore
from app.store.builds import BuildStore
from app.store.faqs import FaqOut, ImportReport, KbRecord, KbSnapshot, KbStore
from app.store.console_sessions import ConsoleSessionStore
from app.store.catalog import KbCatalog
from kb.records import DEFAULT_KB, kb_name_problem
from app.store.query_log import PRUNE_CHUNK, PruneResult, QueryLogStore
from app.store.reviews import ReviewStore
from app.store.suggestions import SuggestionStore
from app.store.publications import PublicationStore

if TYPE_CHECKING:
    from app.settings import Settings


class FaqStore:
    def __init__(self, url_or_engine: str | Engine, kb: str = DEFAULT_KB):
        """Connect to an existing database, scoped to KB `kb`; tables are created by migrations (see
        from_settings). Raises ValueError for a malformed KB name (whether it exists is checked by use)."""
        problem = kb_name_problem(kb)
        if problem:
            raise ValueError(problem)
        if isinstance(url_or_engine, Engine):
            self.engine = url_or_engine
            self._owns_engine = False
        else:
            self.engine = make_engine(str(url_or_engine))
            self._owns_engine = True
        self.kb_name = kb
        self.faqs = KbStore(self.engine, kb)
        self.builds = BuildStore(self.engine, kb)
        self.query_log = QueryLogStore(self.engine, kb)
        self.reviews = ReviewStore(self.engine, kb)
        self.suggestions = SuggestionStore(self.engine, kb)
        self.publications = PublicationStore(self.engine, kb)
        self.audit = AuditStore(self.engine, kb)
        self.catalog = KbCatalog(self.engine)
        self.console_sessions = ConsoleSessionStore(self.engine)

    def for_kb(self, kb: str) -> FaqStore:
        """This database scoped to KB `kb` (sharing the engine: closing it closes nothing)."""
        if kb == self.kb_name:
            return self
        return FaqStore(self.engine, kb)

    def kb_exists(self) -> bool:
        return self.catalog.exists(self.kb_name)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> FaqStore:
        """Connect to the configured database (creating data_dir) and check that its schema is the one
        this code expects. Migrations are the entry points' job (`faq db upgrade`, `faq serve`, the
        Docker entrypoint), never a side effect of opening a store."""
        from app.settings import get_settings

        settings = settings or get_settings()
        Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
        store = cls(settings.db_url, kb=settings.kb)
        try:
            store.check_schema()
        except SchemaNotReady:
            store.close()
            raise
        return store

    def check_schema(self) -> None:
        """Raise SchemaNotReady unless the database is at SCHEMA_REVISION."""
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

    def __enter__(self) -> FaqStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FaqStore({self.engine.url.render_as_string(hide_password=True)!r}, kb={self.kb_name!r})"

    def locked_write(self) -> AbstractContextManager[Connection]:
        """The serialised KB write transaction (app/store/base.py), for callers that must hold the KB lock."""
        return self.faqs.locked_write()

    # ------------------------------------------------------------ KB (app/store/faqs.py)

    def import_records(self, records: Iterable[KbRecord], sync: bool = False, dry_run: bool = False) -> ImportReport:
        return self.faqs.import_records(records, sync=sync, dry_run=dry_run)

    def export_records(self) -> Iterator[KbRecord]:
        return self.faqs.export_records()

    def snapshot(self) -> KbSnapshot:
        return self.faqs.snapshot()

    def revision(self) -> int:
        return self.faqs.revision()

    def stats(self) -> dict[str, Any]:
        return self.faqs.stats()

    def list_faqs(self, offset: int = 0, limit: int = 50, q: str | None = None) -> list[FaqOut]:
        return self.faqs.list_faqs(offset=offset, limit=limit, q=q)

    def count_faqs(self, q: str | None = None) -> int:
        return self.faqs.count_faqs(q)

    def get_faq(self, faq_id: str) -> FaqOut | None:
        return self.faqs.get_faq(faq_id)

    def create_faq(self, faq_id: str, answer: str, questions: Iterable[str], tags: Iterable[str] = (),
                   **fields: Any) -> FaqOut:
        """`fields`: metadata, source, follow_ups, context_only, answers (KbStore.create_faq)."""
        return self.faqs.create_faq(faq_id, answer, questions, tags, **fields)

    def update_faq(self, faq_id: str, answer: str | None = None, questions: Iterable[str] | None = None,
                   tags: Iterable[str] | None = None, **fields: Any) -> FaqOut:
        """`fields`: metadata, source, follow_ups, context_only, answers (KbStore.update_faq)."""
        return self.faqs.update_faq(faq_id, answer=answer, questions=questions, tags=tags, **fields)

    def prompting_to(self, faq_id: str) -> list[str]:
        return self.faqs.prompting_to(faq_id)

    def faq_exists(self, faq_id: str) -> bool:
        return self.faqs.faq_exists(faq_id)

    def delete_faq(self, faq_id: str) -> bool:
        return self.faqs.delete_faq(faq_id)

    # ------------------------------------------------------------ index builds (app/store/builds.py)

    def record_build(self, **fields: Any) -> None:
        self.builds.record_build(**fields)

    def update_build(self, version: str, **fields: Any) -> None:
        self.builds.update_build(version, **fields)

    def list_builds(self, status: str | None = None) -> list[dict[str, Any]]:
        return self.builds.list_builds(status)

    def fail_build_if_building(self, version: str, error: str) -> bool:
        return self.builds.fail_build_if_building(version, error)

    # ------------------------------------------------------------ query log (app/store/query_log.py)

    @property
    def log_rows_dropped(self) -> int:
        """Query-log rows log_queries could not store, since this store was opened."""
        return self.query_log.log_rows_dropped

    def log_queries(self, rows: list[dict[str, Any]]) -> int:
        return self.query_log.log_queries(rows)

    def read_query_log(self, since: datetime | None = None, with_feedback: bool = False) -> list[dict[str, Any]]:
        return self.query_log.read_query_log(since, with_feedback=with_feedback)

    def recent_scores(self, index_version: str, arms: Sequence[str], limit: int) -> list[float]:
        return self.query_log.recent_scores(index_version, arms, limit)

    def record_feedback(self, request_id: str, correct: bool | None, faq_id: str | None,
                        session_id: str | None = None, require_session: bool = False) -> bool:
        return self.query_log.record_feedback(request_id, correct, faq_id, session_id=session_id,
                                              require_session=require_session)

    def count_query_log_before(self, cutoff: datetime) -> int:
        return self.query_log.count_query_log_before(cutoff)

    def prune_query_log(self, cutoff: datetime, *, chunk_size: int = PRUNE_CHUNK, max_seconds: float | None = None,
                        progress: Callable[[int], None] | None = None) -> PruneResult:
        return self.query_log.prune_query_log(cutoff, chunk_size=chunk_size, max_seconds=max_seconds,
                                              progress=progress)
