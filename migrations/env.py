"""Alembic environment: runs the migrations against FaqStore's engine setup (app/db/session.py).

The database URL comes from, in order: a connection passed in `config.attributes["connection"]`,
the `sqlalchemy.url` option (set by migrations/runner.py), or the app settings (FAQ_DATABASE_URL /
FAQ_DATA_DIR) when the `alembic` command line is used with the root alembic.ini.
"""
from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.pool import NullPool

from app.db.models import Base
from app.db.session import make_engine

config = context.config
target_metadata = Base.metadata

# Only the alembic CLI has an ini file; programmatic runs must not reconfigure the app's logging.
if config.config_file_name is not None and config.get_section("loggers") is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from app.settings import get_settings

    settings = get_settings()
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    return settings.db_url


def _configure_options(dialect_name: str) -> dict:
    sqlite = dialect_name == "sqlite"
    return {
        "target_metadata": target_metadata,
        "compare_type": True,
        # SQLite cannot ALTER most things in place; batch mode makes future migrations portable.
        "render_as_batch": sqlite,
        # SQLite DDL is transactional once BEGIN is really emitted (app/db/session.py does), so a
        # failed or concurrent migration rolls back cleanly instead of leaving half a schema.
        **({"transactional_ddl": True} if sqlite else {}),
    }


def run_migrations_offline() -> None:
    url = _database_url()
    dialect_name = url.split(":", 1)[0].split("+", 1)[0]
    context.configure(url=url, literal_binds=True, dialect_opts={"paramstyle": "named"}, **_configure_options(dialect_name))
    with context.begin_transaction():
        context.run_migrations()


def _run_with(connection: Connection) -> None:
    context.configure(connection=connection, **_configure_options(connection.dialect.name))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    engine = make_engine(_database_url(), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            _run_with(connection)
            # context.begin_transaction() only commits the transaction it started itself
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
