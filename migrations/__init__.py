"""Alembic migrations for the FAQ store (schema in app/db/models.py).

Run them with `faq db upgrade` / `migrations.runner.upgrade(url)`; the root alembic.ini is only for
people who prefer the `alembic` command line.
"""
