"""Database layer: SQLAlchemy models (`models`) and engine creation (`session`).

The schema is owned by the Alembic migrations in `migrations/`; `app.store.FaqStore` is the only
code that should query these tables.
"""
from app.db.models import Base, Faq, IndexBuild, Kb, KbToken, QueryLog, QuestionVariant
from app.db.session import is_sqlite, make_engine

__all__ = ["Base", "Faq", "IndexBuild", "Kb", "KbToken", "QueryLog", "QuestionVariant", "is_sqlite", "make_engine"]
