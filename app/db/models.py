"""SQLAlchemy 2 declarative models: the FAQ knowledge base, index builds and the query log.

The schema itself is created by the Alembic migrations in `migrations/versions/`; these models must stay
identical to it (tests/test_migrations.py checks that autogenerate finds no difference). Types are
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
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# field limits shared by the schema and the validation of every way FAQs come in
from kb.records import MAX_FAQ_ID_CHARS, MAX_QUESTION_CHARS

#: the Alembic revision these models describe (migrations/versions/); the store refuses to run on a
#: database at another one, so an entry point that forgot `faq db upgrade` fails at start-up, not mid-request
SCHEMA_REVISION = "0001"


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


class Faq(Base):
    """One FAQ: an answer (plus tags) matched by one or more question variants."""

    __tablename__ = "faqs"

    faq_id: Mapped[str] = mapped_column(String(MAX_FAQ_ID_CHARS), primary_key=True)
    answer: Mapped[str] = mapped_column(Text, nullable=False)
    tags: Mapped[list] = mapped_column(JSON, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class QuestionVariant(Base):
    """One phrasing of an FAQ's question (the FAQ's paraphrase cluster has many)."""

    __tablename__ = "question_variants"
    __table_args__ = (UniqueConstraint("faq_id", "question"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    faq_id: Mapped[str] = mapped_column(
        String(MAX_FAQ_ID_CHARS), ForeignKey("faqs.faq_id", ondelete="CASCADE"), nullable=False
    )
    question: Mapped[str] = mapped_column(String(MAX_QUESTION_CHARS), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class IndexBuild(Base):
    """One index build attempt (see index/build.py); `version` names its folder under index_dir."""

    __tablename__ = "index_builds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
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

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
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
    feedback_correct: Mapped[bool | None] = mapped_column(Boolean)
    feedback_faq_id: Mapped[str | None] = mapped_column(String(MAX_FAQ_ID_CHARS))


class KbMeta(Base):
    """Small integer counters; key "revision" is bumped by every KB mutation (pollers watch it)."""

    __tablename__ = "kb_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, nullable=False)
