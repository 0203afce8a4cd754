"""Console sign-ins counted per KB: an index on console_sessions (kb, last_used_at).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27

A sign-in ends the least recently used sessions of its own KB (or of FAQ_ADMIN_TOKEN's, kb NULL) past
the KB's cap (app/store/console_sessions.py); the index lets it count them and find the oldest without
reading the other KBs' rows.
"""
from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_console_sessions_kb_last_used_at", "console_sessions", ["kb", "last_used_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_kb_last_used_at", table_name="console_sessions")
