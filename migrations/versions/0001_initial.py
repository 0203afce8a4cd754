"""Initial schema: faqs, question_variants, index_builds, query_log, kb_meta.

Revision ID: 0001
Revises:
Create Date: 2024-06-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Spelled out instead of imported from app.db.models: a migration must keep describing the schema
# as it was when written, whatever the models become later.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "faqs",
        sa.Column("faq_id", sa.String(200), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("faq_id", name="pk_faqs"),
    )
    op.create_table(
        "question_variants",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("faq_id", sa.String(200), nullable=False),
        sa.Column("question", sa.String(1000), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["faq_id"], ["faqs.faq_id"], name="fk_question_variants_faq_id_faqs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_question_variants"),
        sa.UniqueConstraint("faq_id", "question", name="uq_question_variants_faq_id_question"),
    )
    op.create_table(
        "index_builds",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("encoder_id", sa.String(200), nullable=False),
        sa.Column("n_faqs", sa.Integer(), nullable=True),
        sa.Column("n_variants", sa.Integer(), nullable=True),
        sa.Column("dim", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("n_trees", sa.Integer(), nullable=True),
        sa.Column("search_k", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("timings", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_index_builds"),
        sa.UniqueConstraint("version", name="uq_index_builds_version"),
    )
    op.create_table(
        "query_log",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("arm", sa.String(64), nullable=True),
        sa.Column("session_id", sa.String(128), nullable=True),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("faq_id", sa.String(200), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("index_version", sa.String(64), nullable=True),
        sa.Column("feedback_correct", sa.Boolean(), nullable=True),
        sa.Column("feedback_faq_id", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_query_log"),
        sa.UniqueConstraint("request_id", name="uq_query_log_request_id"),
    )
    op.create_index("ix_query_log_created_at", "query_log", ["created_at"])
    kb_meta = op.create_table(
        "kb_meta",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_kb_meta"),
    )
    op.bulk_insert(kb_meta, [{"key": "revision", "value": 0}])


def downgrade() -> None:
    op.drop_index("ix_query_log_created_at", table_name="query_log")
    op.drop_table("query_log")
    op.drop_table("index_builds")
    op.drop_table("question_variants")
    op.drop_table("faqs")
    op.drop_table("kb_meta")
