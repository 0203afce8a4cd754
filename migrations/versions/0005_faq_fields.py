"""The FAQ fields of conversation-grade matching: metadata, source, follow_ups and context_only on faqs.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27

`metadata` (string -> string, keys lower-cased), `source` (text or NULL), `follow_ups` (an ordered list of
{"faq_id", "text"}: the prompts shown after the answer) and `context_only` (answered only as a follow-up);
kb/records.py validates them. Existing rows get the defaults ({}, NULL, [], false) and keep everything else.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both backends, no batch rebuild: SQLite (3.35+) adds and drops these columns in
# place, and a rebuild would drop the old `faqs` with foreign keys on, cascading into question_variants.
def upgrade() -> None:
    op.add_column("faqs", sa.Column("metadata", sa.JSON(), nullable=False, server_default=sa.text("'{}'")))
    op.add_column("faqs", sa.Column("source", sa.Text(), nullable=True))
    op.add_column("faqs", sa.Column("follow_ups", sa.JSON(), nullable=False, server_default=sa.text("'[]'")))
    op.add_column("faqs", sa.Column("context_only", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    for column in ("context_only", "follow_ups", "source", "metadata"):
        op.drop_column("faqs", column)
