"""The review queues, the decision of each logged query, and console sign-ins in the database.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26

`review_dismissals` keeps what an FAQ owner dismissed from a review queue (a mined phrasing, a cluster
of unanswered queries, a lint finding), with the reason, so `faq kb mine`, `faq kb lint` and the console
stop proposing it. `query_log.decision` (answer | clarify | abstain) tells a clarification from an
abstention; rows logged before it have none (an answered row still says so through `faq_id`).
`console_sessions` keeps who is signed in to the console, so sign-ins survive a restart and every replica
sees them; it holds digests and token ids, never a token.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("query_log", sa.Column("decision", sa.String(16), nullable=True))
    op.create_table(
        "review_dismissals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kb", sa.String(64), nullable=False),
        sa.Column("queue", sa.String(16), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("dismissed_by", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["kb"], ["kbs.name"], name="fk_review_dismissals_kb_kbs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_review_dismissals"),
        sa.UniqueConstraint("kb", "queue", "key", name="uq_review_dismissals_kb_queue_key"),
    )


    op.create_table(
        "console_sessions",
        sa.Column("id_sha256", sa.String(64), nullable=False),
        sa.Column("kb", sa.String(64), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("admin_sha256", sa.String(64), nullable=True),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("flash", sa.Text(), nullable=True),
        sa.Column("pending", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["kb"], ["kbs.name"], name="fk_console_sessions_kb_kbs", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["token_id"], ["kb_tokens.id"], name="fk_console_sessions_token_id_kb_tokens",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id_sha256", name="pk_console_sessions"),
    )
    op.create_index("ix_console_sessions_last_used_at", "console_sessions", ["last_used_at"])


def downgrade() -> None:
    op.drop_table("console_sessions")
    op.drop_table("review_dismissals")
    with op.batch_alter_table("query_log") as batch:
        batch.drop_column("decision")
