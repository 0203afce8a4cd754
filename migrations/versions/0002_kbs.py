"""Knowledge bases: every FAQ, phrasing, build and logged query belongs to a named KB; today's data
becomes KB `default` with nothing lost. Adds `kbs` (revision + settings per KB, replacing `kb_meta`)
and `kb_tokens`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26

SQLite rebuilds a table to change its primary key, and with foreign keys on, dropping the old `faqs`
would cascade into `question_variants`. So the phrasings' foreign key is dropped first, `faqs` is
rebuilt while nothing refers to it, and the key comes back (now on kb + faq_id) last. Phrasing ids are
kept: builds refer to phrasings by id.
"""
from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

KB = sa.String(64)


def upgrade() -> None:
    conn = op.get_bind()
    revision_now = conn.execute(sa.text("SELECT value FROM kb_meta WHERE key = 'revision'")).scalar() or 0
    now = datetime.now(timezone.utc)
    kbs = op.create_table(
        "kbs",
        sa.Column("name", KB, nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_kbs"),
    )
    op.bulk_insert(kbs, [{"name": "default", "revision": int(revision_now), "settings": {},
                          "created_at": now, "updated_at": now}])

    with op.batch_alter_table("question_variants") as batch:
        batch.drop_constraint("fk_question_variants_faq_id_faqs", type_="foreignkey")
        batch.drop_constraint("uq_question_variants_faq_id_question", type_="unique")
        batch.add_column(sa.Column("kb", KB, nullable=False, server_default="default"))

    with op.batch_alter_table("faqs") as batch:
        batch.add_column(sa.Column("kb", KB, nullable=False, server_default="default"))
        batch.drop_constraint("pk_faqs", type_="primary")
        batch.create_primary_key("pk_faqs", ["kb", "faq_id"])
        batch.create_foreign_key("fk_faqs_kb_kbs", "kbs", ["kb"], ["name"], ondelete="CASCADE")

    with op.batch_alter_table("question_variants") as batch:
        batch.create_unique_constraint("uq_question_variants_kb_faq_id_question", ["kb", "faq_id", "question"])
        batch.create_foreign_key("fk_question_variants_kb_faqs", "faqs", ["kb", "faq_id"], ["kb", "faq_id"],
                                 ondelete="CASCADE")

    with op.batch_alter_table("index_builds") as batch:
        batch.add_column(sa.Column("kb", KB, nullable=False, server_default="default"))
        batch.create_foreign_key("fk_index_builds_kb_kbs", "kbs", ["kb"], ["name"], ondelete="CASCADE")
        batch.create_index("ix_index_builds_kb", ["kb"])

    op.add_column("query_log", sa.Column("kb", KB, nullable=False, server_default="default"))
    op.create_index("ix_query_log_kb_created_at", "query_log", ["kb", "created_at"])

    op.create_table(
        "kb_tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kb", KB, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["kb"], ["kbs.name"], name="fk_kb_tokens_kb_kbs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_kb_tokens"),
        sa.UniqueConstraint("token_sha256", name="uq_kb_tokens_token_sha256"),
    )
    op.create_index("ix_kb_tokens_kb", "kb_tokens", ["kb"])
    op.drop_table("kb_meta")


def downgrade() -> None:
    conn = op.get_bind()
    others = conn.execute(sa.text("SELECT name FROM kbs WHERE name <> 'default' ORDER BY name")).scalars().all()
    if others:
        raise RuntimeError(f"cannot go below revision 0002 while KBs other than 'default' exist "
                           f"({', '.join(others)}): delete them first (`faq kb delete NAME`)")
    revision_now = conn.execute(sa.text("SELECT revision FROM kbs WHERE name = 'default'")).scalar() or 0
    kb_meta = op.create_table(
        "kb_meta",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_kb_meta"),
    )
    op.bulk_insert(kb_meta, [{"key": "revision", "value": int(revision_now)}])
    op.drop_index("ix_kb_tokens_kb", table_name="kb_tokens")
    op.drop_table("kb_tokens")
    op.drop_index("ix_query_log_kb_created_at", table_name="query_log")
    with op.batch_alter_table("query_log") as batch:
        batch.drop_column("kb")
    with op.batch_alter_table("index_builds") as batch:
        batch.drop_index("ix_index_builds_kb")
        batch.drop_constraint("fk_index_builds_kb_kbs", type_="foreignkey")
        batch.drop_column("kb")
    with op.batch_alter_table("question_variants") as batch:
        batch.drop_constraint("fk_question_variants_kb_faqs", type_="foreignkey")
        batch.drop_constraint("uq_question_variants_kb_faq_id_question", type_="unique")
        batch.drop_column("kb")
    with op.batch_alter_table("faqs") as batch:
        batch.drop_constraint("fk_faqs_kb_kbs", type_="foreignkey")
        batch.drop_constraint("pk_faqs", type_="primary")
        batch.drop_column("kb")
        batch.create_primary_key("pk_faqs", ["faq_id"])
    with op.batch_alter_table("question_variants") as batch:
        batch.create_unique_constraint("uq_question_variants_faq_id_question", ["faq_id", "question"])
        batch.create_foreign_key("fk_question_variants_faq_id_faqs", "faqs", ["faq_id"], ["faq_id"],
                                 ondelete="CASCADE")
    op.drop_table("kbs")
