"""The run's store: SQLModel over SQLite by default, any SQLAlchemy URL when given."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event, inspect
from sqlmodel import Session, SQLModel, create_engine, select

from benchfill import schema
from benchfill.errors import ConfigError

# The schema this code writes. A store records its version; opening an older one applies the
# migrations from its version on, in order (MIGRATIONS[v] takes version v to v + 1, the way
# simonw/llm keeps its ordered, named migrations), and a newer one is refused. A new table needs no
# migration (it is created where missing); a changed or added column does.
SCHEMA_VERSION = 2


def m001_record_version(conn: Connection) -> None:
    """0 -> 1: a store written before versions were recorded already holds the version-1 tables;
    only the version table is new (created with any other missing table)."""


def m002_candidate_review_record(conn: Connection) -> None:
    """1 -> 2: a selected candidate keeps its review record in the store (``Candidate.review_json``),
    so review and release read the queue from the store, PostgreSQL included."""
    if "candidate" in set(inspect(conn).get_table_names()):
        columns = {c["name"] for c in inspect(conn).get_columns("candidate")}
        if "review_json" not in columns:
            conn.exec_driver_sql("ALTER TABLE candidate ADD COLUMN review_json TEXT")


MIGRATIONS: list[Callable[[Connection], None]] = [m001_record_version, m002_candidate_review_record]


def _url(target: str | Path) -> str:
    s = str(target)
    if "://" in s:
        return s
    return f"sqlite:///{Path(s).resolve()}"


class Store:
    """Open (and create if needed) a store at a file path or SQLAlchemy URL."""

    def __init__(self, target: str | Path):
        url = _url(target)
        self.url = url
        try:
            if url.startswith("sqlite"):
                self.engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
                event.listen(self.engine, "connect", _sqlite_pragmas)
            else:
                self.engine = create_engine(url, pool_pre_ping=True)
            with self.engine.begin() as conn:
                self.schema_version = _upgrade(conn, _redact(url))
        except ConfigError:
            raise
        except Exception as exc:  # bad URL, unreachable server, unwritable file
            raise ConfigError(f"cannot open store {_redact(url)}: {exc.__class__.__name__}: {exc}") from exc

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s:
            yield s
            s.commit()

    # -- small helpers used everywhere ----------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        with self.session() as s:
            row = s.get(schema.RunMeta, key)
            return default if row is None else json.loads(row.value_json)

    def set_meta(self, key: str, value: Any) -> None:
        with self.session() as s:
            s.merge(schema.RunMeta(key=key, value_json=json.dumps(value)))

    def all(self, table: type[SQLModel], *where) -> list:
        with self.session() as s:
            return list(s.exec(select(table).where(*where)) if where else s.exec(select(table)))

    def close(self) -> None:
        self.engine.dispose()


def _upgrade(conn: Connection, where: str) -> int:
    """Bring the store on ``conn`` to SCHEMA_VERSION (create, or migrate an older one); refuse a newer."""
    tables = set(inspect(conn).get_table_names())
    version_table = schema.SchemaVersion.__table__
    if version_table.name in tables:
        version = conn.execute(select(version_table.c.version)).scalar() or 0
    elif tables & set(schema.metadata.tables):
        version = 0  # a benchfill store from before versions were recorded
    else:
        version = SCHEMA_VERSION  # a new store: created at the current schema below
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"store {where}: schema version {version} was written by a newer benchfill (this one reads up to "
            f"{SCHEMA_VERSION}); upgrade benchfill to open it"
        )
    for step in MIGRATIONS[version:SCHEMA_VERSION]:
        step(conn)
    schema.metadata.create_all(conn)
    if version_table.name not in tables or version != SCHEMA_VERSION:
        conn.execute(version_table.delete())
        conn.execute(version_table.insert().values(id=1, version=SCHEMA_VERSION))
    return SCHEMA_VERSION


STORE_FILE = "store.db"
STORE_URL_FILE = "store.url"


def open_run_store(run_dir: str | Path, url: str | None = None, *, create: bool = True) -> Store:
    """The store of a run: ``run_dir/store.db`` by default, or the SQLAlchemy URL given once
    (remembered in ``run_dir/store.url`` so review and release find it again).

    A URL must not carry a password: the file would then hold a secret. PostgreSQL reads it from
    the environment (``PGPASSWORD``) or ``~/.pgpass`` instead.
    """
    run_dir = Path(run_dir)
    remembered = run_dir / STORE_URL_FILE
    if url:
        if "://" not in url:
            raise ConfigError(f"--store {url!r}: expected a SQLAlchemy URL such as postgresql+psycopg://user@host/db")
        if _has_password(url):
            raise ConfigError(
                "--store: the URL carries a password; leave it out and set PGPASSWORD (or ~/.pgpass) instead"
            )
        if remembered.is_file() and remembered.read_text().strip() != url:
            raise ConfigError(f"{remembered}: this run already uses another store ({remembered.read_text().strip()})")
        run_dir.mkdir(parents=True, exist_ok=True)
        store = Store(url)
        if not remembered.is_file():
            remembered.write_text(url + "\n")
        return store
    if remembered.is_file():
        return Store(remembered.read_text().strip())
    db = run_dir / STORE_FILE
    if not create and not db.is_file():
        raise ConfigError(f"{db}: the run has no store")
    return Store(db)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    # WAL: readers (the review page) never block the one writer; NORMAL sync is durable across a kill.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _has_password(url: str) -> bool:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).password is not None
    except ArgumentError as exc:
        raise ConfigError(f"--store: not a SQLAlchemy URL ({exc})") from None


def _redact(url: str) -> str:
    """Hide a password in a URL before it reaches a message."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        if ":" not in creds:
            return url
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url
