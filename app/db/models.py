"""SQLAlchemy 2 declarative models: the knowledge bases, their FAQs, index builds, access tokens and the
query log. Every row belongs to one KB (`kb`, a name from `kbs`); a deployment's first KB is `default`.

The schema itself is created by the Alembic migrations in `migrations/versions/`; these models must stay
identical to it (tests/app/store/test_migrations.py checks that autogenerate finds no difference). Types are
portable: JSON and timezone-aware DateTime work on both SQLite and PostgreSQL.
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# field limits shared by the schema and the validation of every way FAQs come in
from kb.records import DEFAULT_KB, MAX_FAQ_ID_CHARS, MAX_KB_NAME_CHARS, MAX_QUESTION_CHARS

#: the Alembic revision these models describe (migrations/versions/); the store refuses to run on a
#: database at another one, so an entry point that forgot `faq db upgrade` fails at start-up, not mid-request
SCHEMA_REVISION = "0008"


# Deterministic constraint names, so that migrations can refer to (and drop) them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Postgres gets a 64-bit id for the (append-only, potentially large) query log; SQLite needs plain
# INTEGER for its rowid autoincrement.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def kb_column(**kwargs) -> Mapped[str]:
    """The KB a row belongs to; rows from before KBs existed are the default KB's."""
    return mapped_column(String(MAX_KB_NAME_CHARS), nullable=False, server_default=DEFAULT_KB, **kwargs)


class Kb(Base):
    """One knowledge base: its revision (bumped by every change to its FAQs, in the same transaction;
    pollers watch it, and KB writers lock its row) and its own settings (app/settings.py KbSettings)."""

    __tablename__ = "kbs"

    name: Mapped[str] = mapped_column(String(MAX_KB_NAME_CHARS), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    settings: Mapped[dict] = mapped_column(JSON, nullable=False, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class Faq(Base):
    """One FAQ of one KB: an answer (plus tags) matched by one or more question variants, with the fields of
    conversation-grade matching (kb/records.py): metadata, source, follow_ups and context_only, and its answers
    in other languages (`answers`)."""

    __tablename__ = "faqs"

    kb: Mapped[str] = mapped_column(String(MAX_KB_NAME_CHARS), ForeignKey("kbs.name", ondelete="CASCADE"),
                                    primary_key=True, server_default=DEFAULT_KB)
    faq_id: Mapped[str] = mapped_column(String(MAX_FAQ_ID_CHARS), primary_key=True)
    answer: Mapped[str] = mapped_column(Text, nullable=False)
    tags: Mapped[list] = mapped_column(JSON, nullable=False)
    # the column is `metadata`; the attribute cannot be (declarative classes keep their MetaData there)
    meta: Mapped[dict] = mapped_column("metadata", JSON, nullable=False, default=dict, server_default=text("'{}'"))
    source: Mapped[str | None] = mapped_column(Text)
    follow_ups: Mapped[list] = mapped_column(JSON, nullable=False, default=list, server_default=text("'[]'"))
    context_only: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=false())
    # the answer in other languages: ISO 639-1 code -> text (migration 0007)
    answers: Mapped[dict] = mapped_column(JSON, nullable=False, default=dict, server_default=text("'{}'"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class QuestionVariant(Base):
    """One phrasing of an FAQ's question (the FAQ's paraphrase cluster has many)."""

    __tablename__ = "question_variants"
    __table_args__ = (
        UniqueConstraint("kb", "faq_id", "question"),
        ForeignKeyConstraint(["kb", "faq_id"], ["faqs.kb", "faqs.faq_id"], ondelete="CASCADE"),
    )

    # ids are unique across KBs: a build's index refers to phrasings by id
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = kb_column()
    faq_id: Mapped[str] = mapped_column(String(MAX_FAQ_ID_CHARS), nullable=False)
    question: Mapped[str] = mapped_column(String(MAX_QUESTION_CHARS), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class IndexBuild(Base):
    """One index build attempt (see index/build.py); `version` names its folder under index_dir."""

    __tablename__ = "index_builds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(MAX_KB_NAME_CHARS), ForeignKey("kbs.name", ondelete="CASCADE"),
                                    nullable=False, index=True, server_default=DEFAULT_KB)
    version: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    encoder_id: Mapped[str] = mapped_column(String(200), nullable=False)
    n_faqs: Mapped[int | None] = mapped_column(Integer)
    n_variants: Mapped[int | None] = mapped_column(Integer)
    dim: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    n_trees: Mapped[int | None] = mapped_column(Integer)
    search_k: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    timings: Mapped[dict | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)


class QueryLog(Base):
    """One served /match query (per query, not per request batch), with optional user feedback."""

    __tablename__ = "query_log"
    __table_args__ = (Index("ix_query_log_kb_created_at", "kb", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    # no foreign key (like faq_id): deleting a KB deletes its rows explicitly (app/store/catalog.py)
    kb: Mapped[str] = kb_column()
    request_id: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, default=utcnow, index=True
    )
    arm: Mapped[str | None] = mapped_column(String(64))
    session_id: Mapped[str | None] = mapped_column(String(128))
    query: Mapped[str] = mapped_column(Text, nullable=False)
    # no foreign key: the log must survive the FAQ being deleted later
    faq_id: Mapped[str | None] = mapped_column(String(MAX_FAQ_ID_CHARS))
    score: Mapped[float | None] = mapped_column(Float)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    index_version: Mapped[str | None] = mapped_column(String(64))
    # answer | clarify | abstain; None on rows logged before it was kept (faq_id still tells an answer)
    decision: Mapped[str | None] = mapped_column(String(16))
    feedback_correct: Mapped[bool | None] = mapped_column(Boolean)
    feedback_faq_id: Mapped[str | None] = mapped_column(String(MAX_FAQ_ID_CHARS))


class KbToken(Base):
    """An access token of one KB (`faq kb token`), of a role (`kind`): "read" is the match-only key bots use
    (its /match routes when FAQ_MATCH_REQUIRES_KEY is set); "viewer", "editor", "publisher" and "admin" are
    people's, each allowed what the one before it is and more (app/api/roles.py). `label` is the token's
    name, as the audit log records it. Only the token's SHA-256 is stored."""

    __tablename__ = "kb_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(MAX_KB_NAME_CHARS), ForeignKey("kbs.name", ondelete="CASCADE"),
                                    nullable=False, index=True)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    token_sha256: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    label: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ReviewDismissal(Base):
    """An item an FAQ owner dismissed from a review queue (app/curation/review.py): a mined phrasing, a cluster of
    unanswered queries or a lint finding, named by `key` (a hash of what identifies it), with why."""

    __tablename__ = "review_dismissals"
    __table_args__ = (UniqueConstraint("kb", "queue", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(MAX_KB_NAME_CHARS), ForeignKey("kbs.name", ondelete="CASCADE"),
                                    nullable=False)
    queue: Mapped[str] = mapped_column(String(16), nullable=False)  # phrasing | cluster | lint
    key: Mapped[str] = mapped_column(String(64), nullable=False)
    subject: Mapped[str] = mapped_column(Text, nullable=False)  # what was dismissed, as the queue showed it
    reason: Mapped[str | None] = mapped_column(Text)
    dismissed_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class SuggestedPhrasing(Base):
    """A phrasing another product suggested for an FAQ (QnA Maker's SuggestedQuestions, Azure's active
    learning), kept as a proposal of the review queue, never a phrasing, until an owner accepts it.
    `key` is the review queue's key of the proposal (app/store/reviews.py `phrasing_key`)."""

    __tablename__ = "suggested_phrasings"
    __table_args__ = (UniqueConstraint("kb", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(MAX_KB_NAME_CHARS), ForeignKey("kbs.name", ondelete="CASCADE"),
                                    nullable=False)
    key: Mapped[str] = mapped_column(String(64), nullable=False)
    faq_id: Mapped[str] = mapped_column(String(MAX_FAQ_ID_CHARS), nullable=False)
    question: Mapped[str] = mapped_column(Text, nullable=False)
    origin: Mapped[str] = mapped_column(String(32), nullable=False)  # the format it was imported from
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class ConsoleSession(Base):
    """One console sign-in (app/api/console/sessions.py). The browser's cookie is a random id; this row is
    found by its SHA-256 and holds no token: a KB token's session names the token's row (revoking or
    deleting it ends the session), FAQ_ADMIN_TOKEN's session the digest of the admin token it was opened
    with (changing FAQ_ADMIN_TOKEN ends it)."""

    __tablename__ = "console_sessions"
    # a sign-in counts and ends the least recently used sessions of its own KB (app/store/console_sessions.py)
    __table_args__ = (Index("ix_console_sessions_kb_last_used_at", "kb", "last_used_at"),)

    id_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    kb: Mapped[str | None] = mapped_column(String(MAX_KB_NAME_CHARS), ForeignKey("kbs.name", ondelete="CASCADE"))
    token_id: Mapped[int | None] = mapped_column(Integer, ForeignKey("kb_tokens.id", ondelete="CASCADE"))
    admin_sha256: Mapped[str | None] = mapped_column(String(64))
    csrf: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    last_used_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow, index=True)
    flash: Mapped[str | None] = mapped_column(Text)  # one message for the next page
    pending: Mapped[dict | None] = mapped_column(JSON)  # the import a dry run checked, waiting to be applied


class Publication(Base):
    """One publication of a KB: the draft's content as it was published (`content`: every FAQ with its
    phrasings and their ids, answers in every language, metadata, tags, follow-ups, context-only flags, and
    the KB's small-talk answers), who published it, when, the note, and what changed since the previous one
    (`summary`). A rollback is a publication too (`kind` "rollback", `restored` the one served again). In a
    KB whose publishing is `reviewed`, production answers from the latest one (app/release/publishing.py)."""

    __tablename__ = "publications"
    __table_args__ = (UniqueConstraint("kb", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(MAX_KB_NAME_CHARS), ForeignKey("kbs.name", ondelete="CASCADE"),
                                    nullable=False)
    number: Mapped[int] = mapped_column(Integer, nullable=False)  # the KB's own count: the id users see
    kind: Mapped[str] = mapped_column(String(16), nullable=False)  # publish | rollback
    restored: Mapped[int | None] = mapped_column(Integer)  # a rollback's: the number of the one served again
    revision: Mapped[int] = mapped_column(Integer, nullable=False)  # the KB's (draft's) revision published
    actor: Mapped[str | None] = mapped_column(String(200))
    note: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[dict] = mapped_column(JSON, nullable=False)
    content: Mapped[dict] = mapped_column(JSON, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class AuditEntry(Base):
    """One change to a KB, appended and never updated (app/store/audit.py): who (a token's name and role, or
    the deployment's admin), through what (`source`: api, cli, console, compat), the request, what was
    done (`action`, on `subject`), and the state before and after. Not tied to the KB's row: a KB's
    deletion is itself recorded and its history kept until a retention prune removes it."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_kb_created_at", "kb", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(MAX_KB_NAME_CHARS), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    actor: Mapped[str] = mapped_column(String(200), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    source: Mapped[str] = mapped_column(String(16), nullable=False)  # api | cli | console | compat
    request_id: Mapped[str | None] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32), nullable=False)
    subject: Mapped[str | None] = mapped_column(String(MAX_FAQ_ID_CHARS))
    before: Mapped[dict | list | None] = mapped_column(JSON)
    after: Mapped[dict | list | None] = mapped_column(JSON)
