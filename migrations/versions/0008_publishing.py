"""Publications and the audit log.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

`publications` holds each KB's published content (a `reviewed` KB's production answers from its latest),
and `audit_log` one row per change, appended only. Tokens keep their rows: the `kind` column now also names
the people's roles (viewer, editor, publisher), an existing "admin" token stays admin and its label is its
name. Nothing existing is changed or lost.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "publications",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kb", sa.String(64), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("restored", sa.Integer(), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(200), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["kb"], ["kbs.name"], name="fk_publications_kb_kbs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_publications"),
        sa.UniqueConstraint("kb", "number", name="uq_publications_kb_number"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("kb", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(200), nullable=True),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_kb_created_at", "audit_log", ["kb", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_kb_created_at", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("publications")
