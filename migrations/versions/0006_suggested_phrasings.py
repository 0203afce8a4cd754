"""Phrasings other products suggested for an FAQ, kept for the review queue.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28

`suggested_phrasings` keeps what a QnA Maker or Azure export suggested (SuggestedQuestions, active learning)
as proposals of the phrasing review queue, named by the queue's key, so accepting or dismissing one works as
for a mined phrasing, and `faq kb export` writes the pending ones back.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "suggested_phrasings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kb", sa.String(64), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("faq_id", sa.String(200), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["kb"], ["kbs.name"], name="fk_suggested_phrasings_kb_kbs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_suggested_phrasings"),
        sa.UniqueConstraint("kb", "key", name="uq_suggested_phrasings_kb_key"),
    )


def downgrade() -> None:
    op.drop_table("suggested_phrasings")
