"""Engines and schema migration.

SQLite: WAL journal, a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions so that a transaction
takes the database's write lock before it reads what it will decide on (no read-then-upgrade deadlocks,
and two writers never decide on the same snapshot). Reads use a second engine with ordinary deferred
transactions, which WAL lets run alongside a writer.

PostgreSQL: one engine; decisions that must not race lock a row (``SELECT ... FOR UPDATE``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic_core
import structlog
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from aggregator.settings import AggregatorSettings

log = structlog.get_logger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
_MIGRATION_LOCK_KEY = 0x67707568  # "gpuh": PostgreSQL advisory lock held while migrating


class StoreError(RuntimeError):
    """The database cannot be opened or migrated."""


@dataclass(frozen=True)
class Database:
    """The engines of one aggregator process: ``writer`` for transactions that change state."""

    writer: Engine
    reader: Engine
    # SQLite has one writer at a time anyway; queueing writers here instead of in SQLite's busy handler
    # (which sleeps in growing steps) keeps write latency flat under load.
    _write_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def is_sqlite(self) -> bool:
        """True for SQLite, whose writers this process must queue itself."""
        return self.writer.dialect.name == "sqlite"

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A transaction that may change state; committed on success, rolled back on an exception."""
        if not self.is_sqlite:
            with self.writer.begin() as conn:
                yield conn
            return
        with self._write_lock, self.writer.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (never blocks writers on SQLite in WAL mode)."""
        with self.reader.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        """Close every pooled connection (at shutdown)."""
        self.writer.dispose()
        if self.reader is not self.writer:
            self.reader.dispose()


def _to_json(value: Any) -> str:
    return pydantic_core.to_json(value).decode()


# The JSON columns (a node's GPUs, findings and labels; event details) are written with every report:
# pydantic's encoder, in Rust, costs a fraction of the standard library's for the same text.
JSON_CODEC: dict[str, Any] = {"json_serializer": _to_json, "json_deserializer": pydantic_core.from_json}


def open_database(settings: AggregatorSettings) -> Database:
    """Create the engines for ``settings.database_url`` and bring the schema to the newest migration."""
    try:
        url = make_url(settings.database_url.get_secret_value())
    except ArgumentError as exc:
        raise StoreError(f"database_url is not a database URL: {exc}") from exc
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise StoreError("an in-memory SQLite database cannot keep the fleet's state: name a file")
        database = Database(
            writer=_sqlite_engine(settings, immediate=True), reader=_sqlite_engine(settings, immediate=False)
        )
    elif url.get_backend_name() == "postgresql":
        engine = create_engine(
            url,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_pool_size,
            pool_pre_ping=True,
            **JSON_CODEC,
        )
        database = Database(writer=engine, reader=engine)
    else:
        raise StoreError(f"unsupported database {url.get_backend_name()!r}: use sqlite or postgresql")
    try:
        migrate(database.writer)
    except OperationalError as exc:
        database.dispose()
        raise StoreError(f"cannot open the database: {exc.orig or exc}") from exc
    return database


def _sqlite_engine(settings: AggregatorSettings, *, immediate: bool) -> Engine:
    url = make_url(settings.database_url.get_secret_value())
    Path(str(url.database)).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"timeout": 30, "check_same_thread": False},
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_pool_size,
        **JSON_CODEC,
    )
    synchronous = settings.sqlite_synchronous

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself instead of pysqlite's implicit, deferred one.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin)

    return engine


def migrate(engine: Engine) -> None:
    """Run every Alembic migration not yet applied; safe when several aggregators start at once."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Transaction-scoped: released at commit, so a crashed migrator never leaves it held.
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    log.info("schema migrated", database=engine.url.render_as_string(hide_password=True))
