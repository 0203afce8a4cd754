"""Answers per language: `answers` on faqs.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28

`answers` (ISO 639-1 code -> the FAQ's answer in that language, beside its main `answer`); kb/records.py
validates it. Existing rows get {} and keep everything else.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both backends, no batch rebuild, as in 0005: a rebuild would drop the old `faqs`
# with foreign keys on, cascading into question_variants.
def upgrade() -> None:
    op.add_column("faqs", sa.Column("answers", sa.JSON(), nullable=False, server_default=sa.text("'{}'")))


def downgrade() -> None:
    op.drop_column("faqs", "answers")
