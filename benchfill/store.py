"""The run's store: SQLModel over SQLite by default, any SQLAlchemy URL when given."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, MetaData, Table, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlmodel import Session, SQLModel, create_engine, select

from benchfill import locks, schema
from benchfill.errors import ConfigError
from benchfill.redact import redact_url, scrub, secret_params

# The schema this code writes. A store records its version; opening an older one applies the
# migrations from its version on, in order (MIGRATIONS[v] takes version v to v + 1, the way
# simonw/llm keeps its ordered, named migrations), and a newer one is refused. A new table needs no
# migration (it is created where missing); a changed or added column does.
SCHEMA_VERSION = 5


def m001_record_version(conn: Connection, run_id: str) -> None:
    """0 -> 1: a store written before versions were recorded already holds the version-1 tables;
    only the version table is new (created with any other missing table)."""


def m002_candidate_review_record(conn: Connection, run_id: str) -> None:
    """1 -> 2: a selected candidate keeps its review record in the store (``Candidate.review_json``),
    so review and release read the queue from the store, PostgreSQL included."""
    if "candidate" in set(inspect(conn).get_table_names()):
        columns = {c["name"] for c in inspect(conn).get_columns("candidate")}
        if "review_json" not in columns:
            conn.exec_driver_sql("ALTER TABLE candidate ADD COLUMN review_json TEXT")


def m003_run_scoped_rows(conn: Connection, run_id: str) -> None:
    """2 -> 3: several runs share one store, so every run's rows carry its id (``run_id``, part of
    the key of the tables keyed by a name). A store from before held one run: its rows become the
    rows of the run that opens it now (``run_id``; "" for a store opened without one).

    A key cannot be changed in place on SQLite, so each table is read, dropped and created
    again at the current schema (so a later migration that adds a column must check for it first),
    its rows written back with the run's id. PostgreSQL's id sequences are moved past the copied ids.
    """
    present = set(inspect(conn).get_table_names())
    for model in schema.RUN_TABLES:
        table = model.__table__
        if table.name not in present or "run_id" in {c["name"] for c in inspect(conn).get_columns(table.name)}:
            continue
        old = Table(table.name, MetaData(), autoload_with=conn)
        rows = [{k: _aware(v) for k, v in r.items()} for r in conn.execute(select(old)).mappings()]
        old.drop(conn)
        table.create(conn)
        for i in range(0, len(rows), 500):
            conn.execute(table.insert(), [{**r, "run_id": run_id} for r in rows[i : i + 500]])
        # Only an integer id the database numbers has a sequence (Item's and Candidate's ids are text).
        serial = table.autoincrement_column
        if conn.dialect.name == "postgresql" and serial is not None and serial.name == "id" and rows:
            conn.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), (SELECT max(id) FROM {table.name}))")


def m004_review_decision_source(conn: Connection, run_id: str) -> None:
    """3 -> 4: a review decision records where it was made (``ReviewDecision.source``: the page or a
    sheet, by its export time), so that re-importing an old sheet cannot undo a later decision."""
    if "reviewdecision" in set(inspect(conn).get_table_names()):
        columns = {c["name"] for c in inspect(conn).get_columns("reviewdecision")}
        if "source" not in columns:
            conn.exec_driver_sql("ALTER TABLE reviewdecision ADD COLUMN source VARCHAR NOT NULL DEFAULT ''")


def m005_memory_world(conn: Connection, run_id: str) -> None:
    """4 -> 5: a memory entry records whether it was made in the simulated world
    (``MemoryRecord.simulated``), so that a run reads only the children of its own world, and the
    memory looks up the review decisions on the children it retrieves by (run, item).

    An existing child takes its world from its run's recorded backend (``RunMeta`` "backend" of the
    same run id: "sim" or not); a child whose run recorded none is left unknown (NULL), and no run reads
    it. The benchmark's own items are False (the same items in either world). The two memory indexes
    gain the column, so they are made again."""
    present = set(inspect(conn).get_table_names())
    if "memoryrecord" in present:
        if "simulated" not in {c["name"] for c in inspect(conn).get_columns("memoryrecord")}:
            conn.exec_driver_sql("ALTER TABLE memoryrecord ADD COLUMN simulated BOOLEAN")
        conn.execute(text("UPDATE memoryrecord SET simulated = :no WHERE origin <> 'generated'"), {"no": False})
        if "runmeta" in present:
            conn.exec_driver_sql(
                "UPDATE memoryrecord SET simulated = (SELECT m.value_json = '\"sim\"' FROM runmeta m "
                "WHERE m.run_id = memoryrecord.run_id AND m.key = 'backend') WHERE origin = 'generated'")
        for index in schema.MemoryRecord.__table__.indexes:
            if index.name in ("ix_memory_near", "ix_memory_origin"):
                conn.exec_driver_sql(f"DROP INDEX IF EXISTS {index.name}")
                index.create(conn)
    if "reviewdecision" in present:
        for index in schema.ReviewDecision.__table__.indexes:
            if index.name == "ix_reviewdecision_run_item":
                index.create(conn, checkfirst=True)


def _aware(value: Any) -> Any:
    """A stored time read back without its zone (SQLite keeps none) is UTC, as written."""
    return schema.as_utc(value) if isinstance(value, datetime) else value


MIGRATIONS: list[Callable[[Connection, str], None]] = [
    m001_record_version, m002_candidate_review_record, m003_run_scoped_rows, m004_review_decision_source,
    m005_memory_world]


def _url(target: str | Path) -> str:
    s = str(target)
    if "://" in s:
        return absolute_url(s)
    return f"sqlite:///{Path(s).resolve()}"


def _driver_url(url: str) -> str:
    """A bare ``postgresql://`` URL on psycopg 3, the driver the postgres extra installs: SQLAlchemy 2.0 takes
    it to mean psycopg2 ("No module named 'psycopg2'"), 2.1 to mean psycopg. A named driver is kept."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    from importlib.util import find_spec

    # only where psycopg is there: a user with psycopg2 alone, on SQLAlchemy 2.0, keeps the driver that works
    if parsed.drivername == "postgresql" and find_spec("psycopg") is not None:
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def absolute_url(url: str) -> str:
    """``url`` with a relative SQLite path made absolute (from the current directory), as a plain path
    is: a URL remembered for later commands must name the same file from wherever they run. Any other
    URL (another database, SQLite in memory or by a ``file:`` URI) is returned as it is."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url  # said where it is checked or opened
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:" or path.startswith("file:"):
        return url
    if Path(path).is_absolute():
        return url
    return parsed.set(database=str(Path(path).resolve())).render_as_string(hide_password=False)


class ReadOnlyStore(ConfigError):
    """The store cannot be written (a read-only file, folder or mount; a ``mode=ro`` URL; a read-only
    database session): a command that would write to it is refused in one line."""


class Store:
    """Open (and create if needed) a store at a file path or SQLAlchemy URL, as seen by one run.

    ``run_id`` names the run whose rows this handle reads and writes (``schema.RUN_TABLES``);
    several runs may share one store. The call cache is shared by all of them.

    A store that cannot be written opens for reading (``read_only``; the review page shows its queue);
    ``writable`` True refuses it at once (``ReadOnlyStore``), for a command that will write. A write
    to it through ``session`` is refused the same way, in one line, wherever it comes.

    ``create`` False (a look at a store, ``memory list``): a SQLite file that is missing, empty or another
    application's database is refused in one line before anything is written to it.
    """

    def __init__(self, target: str | Path, run_id: str = "", *, writable: bool = False, create: bool = True):
        if not isinstance(target, (str, os.PathLike)):  # Store(3) made a SQLite file named "3" here
            raise ConfigError(f"store: expected a path or a URL, got {type(target).__name__} {target!r}")
        url = _url(target)
        self.url = url
        self.run_id = run_id
        if not create:
            _refuse_what_is_no_store(url)
        try:
            try:
                self._open(url, run_id)
            except DBAPIError:
                frozen = None if writable else _frozen_file(self.engine)
                if frozen is None:
                    raise
                # A store no one can write (an archived run, chmod -R a-w): SQLite cannot make the WAL's
                # shared-memory file beside it, and every command, reading ones too, was refused. Nothing
                # changes it there, so it is read as an immutable file.
                self.engine.dispose()
                self._open(url, run_id, frozen=frozen)
        except ConfigError:
            raise
        except DBAPIError as exc:
            if _is_read_only(exc):  # one it cannot write yet must create or upgrade: no use even for reading
                raise self.read_only_error() from exc
            raise self._cannot_open(exc) from exc
        except Exception as exc:  # bad URL, unreachable server, unwritable file
            raise self._cannot_open(exc) from exc
        if writable and self.read_only:
            self.close()
            raise self.read_only_error()
        global LAST_OPENED
        LAST_OPENED = self.where

    def _open(self, url: str, run_id: str, frozen: str | None = None) -> None:
        self.frozen = frozen
        if frozen is not None:  # the file read as it stands (its path as a URI: '?', '#' and '%' escaped)
            import sqlite3
            from urllib.parse import quote

            uri = f"file:{quote(frozen, safe='/')}?mode=ro&immutable=1"
            self.engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True,
                                                                                     check_same_thread=False))
        elif url.startswith("sqlite"):
            self.engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
            event.listen(self.engine, "connect", _sqlite_pragmas)
            _create_as_the_umask_says(self.engine.url.database)
        else:
            # UTF-8 on the wire whatever the database's encoding: on a SQL_ASCII one (initdb under LC_ALL=C)
            # psycopg handed back bytes, and SQLAlchemy failed on its first query with a TypeError
            wire = {"client_encoding": "utf8"} if url.startswith("postgres") else {}
            self.engine = create_engine(_driver_url(url), pool_pre_ping=True, connect_args=wire)
        with self.engine.begin() as conn:
            before = _upgrade(conn, redact_url(self.url), run_id)
            self.read_only = _cannot_write(conn)
        self.schema_version = SCHEMA_VERSION
        if before < SCHEMA_VERSION:  # (said once it is committed) a team on one store must hear it: from now
            # on a benchfill that reads an older schema refuses the store, a look such as `memory list` included
            import logging

            from benchfill.errors import NOTE

            logging.getLogger("benchfill.store").warning(
                "store %s: upgraded from schema %d to %d; a benchfill that reads schema %d at most can no longer "
                "open it", redact_url(self.url), before, SCHEMA_VERSION, before, extra=NOTE)

    def _cannot_open(self, exc: Exception) -> ConfigError:
        # One line: the driver's own message, without SQLAlchemy's SQL text and link to its docs.
        detail = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        said = " ".join(str(detail).split())
        said = scrub(said, values=_secrets_of(self.url))  # a driver's message may quote its connection string
        # SQLite's own words name no cause a user can act on: what they mean where a file is concerned
        db = self.engine.url.database if hasattr(self, "engine") and self.engine.dialect.name == "sqlite" else None
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("psycopg"):
            said += "; pip install 'benchfill[postgres]'"
        if db and "disk i/o error" in said.lower():
            said += " (a full disk?)"
        elif db and "unable to open database file" in said.lower() and Path(db).is_file() \
                and not os.access(Path(db).parent, os.W_OK):
            said += (" (its folder is read-only: SQLite writes its journal beside the file; make the folder "
                     "writable, or copy the run elsewhere)")
        elif db and "unable to open database file" in said.lower():  # SQLite's words for every cause: the cause
            path = Path(db)
            if path.is_dir():
                said += f" ({path} is a folder, not a database file)"
            elif not path.parent.is_dir():
                said += f" (its folder {path.parent} does not exist)"
            elif not os.access(path if path.exists() else path.parent, os.R_OK | os.W_OK):
                said += f" (permission denied on {path if path.exists() else path.parent})"
        return ConfigError(f"cannot open store {redact_url(self.url)}: {exc.__class__.__name__}: {said}")

    @property
    def where(self) -> str:
        """The store as a user names it: the database file of SQLite, else the URL without secrets."""
        if getattr(self, "frozen", None):  # (read where it cannot be written: ``_frozen_file``)
            return self.frozen
        db = self.engine.url.database
        if self.engine.dialect.name == "sqlite" and db and db != ":memory:" and not db.startswith("file:"):
            return db
        return redact_url(self.url)

    def read_only_error(self) -> ReadOnlyStore:
        stuck = self._stuck_sidecars()
        if stuck:  # the file may be writable, and still every write fails through them
            return ReadOnlyStore(f"store {self.where}: read-only, cannot be written: its {' and '.join(stuck)} "
                                 "cannot be written by you (left by an open while the store was read-only, or by "
                                 "another user); remove them when no one has the store open")
        return ReadOnlyStore(f"store {self.where}: read-only, cannot be written (a read-only or immutable file, "
                             "folder or mount, or a read-only URL); make it writable, or copy the run elsewhere")

    def _stuck_sidecars(self) -> list[str]:
        """The SQLite WAL files beside the store that this user cannot write: a read-only open leaves them
        behind with the file's mode (or another user's ownership), and SQLite then refuses every write."""
        if self.engine.dialect.name != "sqlite":
            return []
        db = self.engine.url.database
        if not db or db == ":memory:" or db.startswith("file:"):
            return []
        return [f"{Path(db).name}{end}" for end in ("-wal", "-shm")
                if Path(f"{db}{end}").exists() and not os.access(f"{db}{end}", os.W_OK)]

    @contextmanager
    def session(self) -> Iterator[Session]:
        try:
            with Session(self.engine, expire_on_commit=False) as s:
                yield s
                s.commit()
        except DBAPIError as exc:
            # SQLite says so only at the first write, deep in whatever step made it: one line instead.
            if _is_read_only(exc):
                self.read_only = True
                raise self.read_only_error() from exc
            raise

    def hold_run(self, exclusive: bool = True) -> Callable[[], None]:
        """Hold this handle's run id against every other process on the store (another ``--runs-dir``,
        another machine) until the returned function is called, or the process ends however it ends.
        ``exclusive`` False: a shared hold (a sweep's units, which search different gaps of one run).
        Refused in one line (``ConfigError``) where another process holds it the other way.

        A run directory's own lock cannot see a second directory: one command run at once from two
        folders on one store has one run id, and both would write its rows. PostgreSQL: a session
        advisory lock on a connection kept for the hold (the server drops it when the connection dies).
        SQLite: a record lock on a byte of ``<database>-runs.lock`` beside the database file."""
        key = _advisory_key(f"benchfill run {self.run_id}")
        busy = ConfigError(
            f"run {self.run_id} is in progress in another process on store {redact_url(self.url)} (the same command "
            "from another --runs-dir or machine); wait for it to end, or give another --run-id for a new run")
        if self.engine.dialect.name == "postgresql":
            how = "" if exclusive else "_shared"
            conn, got = _pg_lock(self.engine, f"pg_try_advisory_lock{how}", key)
            if not got:
                conn.close()
                raise busy
            return lambda: _pg_unlock(conn, f"pg_advisory_unlock{how}", key)
        db = self._sqlite_file()
        if db is None:
            return lambda: None
        try:
            handle = locks.hold_byte(Path(f"{db}-runs.lock"), key % (1 << 40), shared=not exclusive)
        except BlockingIOError:
            raise busy from None
        return lambda: locks.release_byte(handle)

    @contextmanager
    def turns(self, purpose: Literal["review", "release"]) -> Iterator[None]:
        """Take turns at ``purpose`` on this run with every other process on the store: what one holder reads
        and then writes within, no other holder (another run folder on the same store, another machine)
        writes in between. Waits for a holder to end; meant for short work (a review decision's check and
        write, a release's check of its version to its row).

        The run folder's own lock serves the processes that share the folder only: two review pages on one
        run, served from two folders of one store, each read an item unchanged and both wrote an edit on it.
        PostgreSQL: a session advisory lock on a connection kept for the hold. SQLite: an flock on
        ``<database>-<purpose>.lock`` beside the database, one for every run of the store (a decision holds it
        for milliseconds; a release, while it writes, makes another run's release wait, not a decision). An
        in-memory store has no other process. Not to be nested: a second hold in one thread waits for ever."""
        if self.engine.dialect.name == "postgresql":
            key = _advisory_key(f"benchfill {purpose} {self.run_id}")
            conn, _ = _pg_lock(self.engine, "pg_advisory_lock", key)
            try:
                yield
            finally:
                _pg_unlock(conn, "pg_advisory_unlock", key)
            return
        db = self._sqlite_file()
        if db is None:
            yield
            return
        fd = locks.hold(Path(f"{os.path.realpath(db)}-{purpose}.lock"))  # (one file however the path is spelt)
        try:
            yield
        finally:
            locks.release(fd)

    def _sqlite_file(self) -> str | None:
        """The SQLite database's file, beside which its lock files go; None for any other store."""
        db = self.engine.url.database
        if self.engine.dialect.name != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
            return None
        return db

    # -- small helpers used everywhere ----------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        with self.session() as s:
            row = s.get(schema.RunMeta, (self.run_id, key))
            return default if row is None else json.loads(row.value_json)

    def set_meta(self, key: str, value: Any) -> None:
        with self.session() as s:
            s.merge(schema.RunMeta(run_id=self.run_id, key=key, value_json=json.dumps(value)))

    def get(self, s: Session, table: type[SQLModel], key: Any):
        """The row of this run with primary key ``key`` (the name, without the run id), or None."""
        return s.get(table, (self.run_id, key))

    def select(self, table: type[SQLModel], *where):
        """``select(table)`` over this run's rows (any table of ``schema.RUN_TABLES``)."""
        q = select(table)
        if "run_id" in table.__table__.c:
            q = q.where(table.run_id == self.run_id)
        return q.where(*where) if where else q

    def all(self, table: type[SQLModel], *where) -> list:
        with self.session() as s:
            return list(s.exec(self.select(table, *where)))

    def close(self) -> None:
        self.engine.dispose()


def _create_as_the_umask_says(db: str | None) -> None:
    """Create a new SQLite file with the mode the umask gives (SQLite makes it 0644 under any umask, its
    journal files after it): a team sharing runs by group (umask 002) could not resume, review or release
    each other's runs."""
    if not db or db == ":memory:" or db.startswith("file:"):
        return
    try:
        os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError:  # there already, or not to be made here: SQLite says which, as before
        pass


def _frozen_file(engine: Any) -> str | None:
    """The SQLite file of ``engine`` where no one writes it: it and its folder without a write bit for anyone
    (an archived run, ``chmod -R a-w``), and no write-ahead log beside it holding changes not yet in the file
    (which an immutable read would miss). None otherwise: a folder only this user cannot write (a shared run,
    its owner at work; a read-only bind mount of a folder written elsewhere) changes under an immutable
    read, which then showed stale and torn rows."""
    db = engine.url.database
    if engine.dialect.name != "sqlite" or engine.url.query or not db or db == ":memory:" or db.startswith("file:"):
        return None
    path = Path(db).resolve()  # (a link's target: its WAL is beside it, not beside the link)
    if not path.is_file() or os.access(path.parent, os.W_OK) or not os.access(path, os.R_OK):
        return None
    try:  # a read-only mount is not enough: the same folder may be written through another (a bind mount)
        if (path.stat().st_mode | path.parent.stat().st_mode) & 0o222:
            return None
    except OSError:
        return None
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return None
    return str(path)


def _cannot_write(conn: Connection) -> bool:
    """Whether SQLite refuses writes to this store. A store already at the current schema is opened
    without a write, and SQLite grants even ``BEGIN IMMEDIATE`` on a file it cannot write: a write
    that changes no row asks it (inside the upgrade's transaction, so it costs no lock)."""
    if conn.dialect.name != "sqlite":
        return False
    try:
        conn.execute(schema.SchemaVersion.__table__.delete().where(text("0")))
    except DBAPIError as exc:
        if _is_read_only(exc):
            return True
        raise
    return False


def _is_read_only(exc: DBAPIError) -> bool:
    """SQLite's "attempt to write a readonly database"; PostgreSQL's read-only transaction (25006)."""
    said = str(exc.orig or exc)
    return "readonly database" in said or getattr(exc.orig, "sqlstate", None) == "25006"


def _advisory_key(name: str) -> int:
    """A PostgreSQL advisory lock's key (a signed 64-bit number) for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def _pg_lock(engine: Any, call: str, key: int) -> tuple[Connection, Any]:
    """``select call(key)`` on a connection of its own, kept for the hold (the lock is the session's): the
    connection and what the call answered."""
    conn = engine.connect()
    try:
        got = conn.execute(text(f"select {call}(:k)"), {"k": key}).scalar()
        conn.commit()
    except BaseException:
        conn.invalidate()
        conn.close()
        raise
    return conn, got


def _pg_unlock(conn: Connection, call: str, key: int) -> None:
    try:
        conn.execute(text(f"select {call}(:k)"), {"k": key})
        conn.commit()
    except Exception:  # the connection is gone: so is its lock
        conn.invalidate()
    conn.close()


_UPGRADE_LOCK = 0x62666C6C  # "bfll": one advisory lock id for benchfill's schema upgrades


def _upgrade(conn: Connection, where: str, run_id: str = "") -> int:
    """Bring the store on ``conn`` to SCHEMA_VERSION (create, or migrate an older one); refuse a newer. Returns
    the schema it was at (SCHEMA_VERSION for a new one)."""
    if conn.dialect.name == "postgresql":
        # Several processes may open a new store at once (the tasks of a sweep): without a lock two
        # would create the same tables and one fail. The lock is the transaction's.
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_UPGRADE_LOCK})")
    elif conn.dialect.name == "sqlite":
        # The same on SQLite: take the file's write lock before reading what is there. pysqlite opens
        # no transaction for a SELECT or a CREATE TABLE, so without this two processes could both find
        # no tables and both create them. The transaction is the connection's: commit ends it.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    tables = set(inspect(conn).get_table_names())
    version_table = schema.SchemaVersion.__table__
    if version_table.name in tables:
        version = conn.execute(select(version_table.c.version)).scalar() or 0
    elif {"item", "runmeta"} <= tables:
        version = 0  # a benchfill store from before versions were recorded (it held both from the first)
    elif tables:
        # another application's database (a table named item or release, or none of benchfill's): taken for
        # an old store, its table was dropped and made again with benchfill's columns; else benchfill's tables
        # went in beside its own
        raise _foreign(tables, where)
    else:
        version = SCHEMA_VERSION  # a new store: created at the current schema below
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"store {where}: schema version {version} was written by a newer benchfill (this one reads up to "
            f"{SCHEMA_VERSION}); upgrade benchfill to open it"
        )
    for step in MIGRATIONS[version:SCHEMA_VERSION]:
        step(conn, run_id)
    schema.metadata.create_all(conn)
    if version_table.name not in tables or version != SCHEMA_VERSION:
        conn.execute(version_table.delete())
        conn.execute(version_table.insert().values(id=1, version=SCHEMA_VERSION))
    return version


def _foreign(tables: set[str], where: str) -> ConfigError:
    shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    return ConfigError(f"store {where}: holds tables that are not a benchfill store's ({shown}); give "
                       "benchfill a database of its own")


def _refuse_what_is_no_store(url: str) -> None:
    """For a look that must not make a store (``Store(create=False)``): refuse a SQLite file that holds no
    benchfill store, before the open that would write to it. The open itself switches the file to WAL and
    creates the schema in an empty one: an empty file (``: > x.db``) became a store, and another
    application's database was switched to WAL before it was refused. The file is read with SQLite's
    read-only mode here; one it cannot read that way (not a database, a frozen run) is left to the open,
    which says why as before. So is a file already in WAL mode (a store benchfill wrote): a read-only
    connection to it leaves the WAL's files beside it, and the open changes nothing in it before
    ``_upgrade`` refuses one that is not a store."""
    import sqlite3
    from urllib.parse import quote

    try:
        u = make_url(url)
    except ArgumentError:
        return  # refused by the open, in one line of its own
    db = u.database or ""
    if u.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:") or u.query:
        return
    where = redact_url(url)
    if not Path(db).is_file():
        raise ConfigError(f"store {where}: {db}: no such file")
    try:
        with open(db, "rb") as f:
            header = f.read(100)
    except OSError:
        return
    if header.startswith(b"SQLite format 3\0") and len(header) == 100 and header[18] == 2:  # WAL mode
        return
    try:
        conn = sqlite3.connect(f"file:{quote(db, safe='/')}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error:
        return
    if not tables:
        raise ConfigError(f"store {where}: holds no benchfill store (an empty file or database); name a "
                          "store a run has written")
    if schema.SchemaVersion.__table__.name not in tables and not {"item", "runmeta"} <= tables:
        raise _foreign(tables, where)


STORE_FILE = "store.db"
STORE_URL_FILE = "store.url"


# The store this process opened last, as a user names it: what the CLI names when a store stops answering
# mid-command (a command works on one store; the error, raised deep in a step, does not say which).
LAST_OPENED: str | None = None


def _refuse_a_lost_file(url: str, remembered: Path) -> None:
    """A run's remembered SQLite store must still be there: opening it would make a new, empty file, and
    review decisions would go into that copy, lost once the real one is back (a moved file, an unmounted
    disk). PostgreSQL says so itself (no such database)."""
    try:
        u = make_url(url)
    except Exception:  # noqa: BLE001  (Store refuses a bad URL in one line of its own)
        return
    db = u.database or ""
    if u.get_backend_name() == "sqlite" and db and db != ":memory:" and not db.startswith("file:") \
            and not Path(db).exists():
        raise ConfigError(f"store {redact_url(url)} (named in {remembered}): {db}: no such file, and the run's rows "
                          "are in it: put it back (a moved file, a disk not mounted), or start a new run")


def refuse_another_store(run_dir: Path, url: str, *,
                         way_out: str = "rerun without --store, or give another --run-id") -> tuple[str, str] | None:
    """Refuse the store ``url`` (absolute) for a run that already has another one, named in its ``store.url``
    or its own ``store.db``; else the URL and run id it remembers (None: none yet). Opens nothing, so a
    caller (a sweep, for each of its runs) can ask before it creates the database; ``way_out`` is what the
    refusal tells that caller's user to do instead."""
    remembered = run_dir / STORE_URL_FILE
    known = _remembered(remembered) if remembered.is_file() else None
    # (a run remembered before URLs were made absolute holds its URL as given)
    if known is not None and absolute_url(known[0]) != url:
        raise ConfigError(f"{remembered}: this run already uses another store ({redact_url(known[0])})")
    if known is None and (run_dir / STORE_FILE).is_file():
        # Starting over into the new store would hide this run's own rows: its gaps, its review decisions.
        raise ConfigError(f"{run_dir / STORE_FILE}: this run already has its own store; {way_out}")
    return known


def open_run_store(run_dir: str | Path, url: str | None = None, *, create: bool = True,
                   writable: bool | None = None, where: str = "--store") -> Store:
    """The store of a run: ``run_dir/store.db`` by default, or the SQLAlchemy URL given once
    (remembered in ``run_dir/store.url`` so review and release find it again).

    A store of its own holds one run, so its rows need no run id (``""``: the directory may be
    renamed). A store named by URL may hold many runs: the run's rows carry its id, the run
    directory's name when the URL was first given, remembered beside the URL.

    A URL must not carry a password (``user:password@`` or ``?password=``, ``check_store_url``): the
    file would then hold a secret. PostgreSQL reads it from the environment (``PGPASSWORD``) or
    ``~/.pgpass`` instead.

    ``writable`` (default: ``create``, a run being made or resumed) refuses a store that cannot be
    written at once (``ReadOnlyStore``), before the command does any work it could not record.
    """
    if writable is None:
        writable = create
    run_dir = Path(run_dir)
    remembered = run_dir / STORE_URL_FILE
    if url:
        check_store_url(url, where)  # ``where``: the option as the caller knows it (a library caller's field)
        url = absolute_url(url)  # before it is remembered: review and release may run from elsewhere
        known = refuse_another_store(run_dir, url)
        if known is not None:
            _refuse_a_lost_file(url, remembered)
        run_dir.mkdir(parents=True, exist_ok=True)
        run_id = known[1] if known is not None else run_dir.name
        store = Store(url, run_id=run_id, writable=writable)
        if known is None and _holds_a_run_of_its_own(store):
            store.close()
            raise ConfigError(f"--store {redact_url(url)}: this database is a run directory's own store (its rows "
                              "carry no run id); name a database of its own for runs to share")
        if known is None:
            from benchfill.outputs import shared_mode, temp_path

            tmp = temp_path(remembered.parent, remembered.name)  # (not "store.tmp": a user's file of that name)
            try:
                tmp.write_text(f"{url}\n{run_id}\n")
                os.chmod(tmp, shared_mode())
                tmp.replace(remembered)
            except BaseException:
                tmp.unlink(missing_ok=True)
                store.close()
                raise
        return store
    if remembered.is_file():
        url, run_id = _remembered(remembered)
        _refuse_a_lost_file(url, remembered)
        return Store(url, run_id=run_id, writable=writable)
    db = run_dir / STORE_FILE
    if not create and not db.is_file():
        # a folder that holds neither file was most likely never a run (a typo, the wrong parent):
        # say that rather than that a run lost its store
        raise ConfigError(f"{run_dir}: not a run directory (it holds neither {STORE_FILE} nor {remembered.name})")
    return Store(db, writable=writable, create=create)


def _holds_a_run_of_its_own(store: Store) -> bool:
    """Whether the store holds the rows of a run that had it as its own ``store.db`` (run id ""): its
    children would be named ``X@`` and its review decisions found under no run (docs/memory.md)."""
    with store.session() as s:
        return s.exec(select(schema.RunMeta.key).where(schema.RunMeta.run_id == "").limit(1)).first() is not None


def _remembered(path: Path) -> tuple[str, str]:
    """The URL and run id in ``store.url`` (a file from before runs shared stores has the URL only:
    its store held that one run, whose rows the upgrade gives the directory's name)."""
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    if not lines:
        raise ConfigError(f"{path}: empty; it should name the run's store URL")
    return lines[0], lines[1] if len(lines) > 1 else path.parent.name


WAL_SWITCH_S = 30.0  # as long as the busy timeout the connection is opened with


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    import sqlite3

    from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

    cur = dbapi_conn.cursor()
    # WAL: readers (the review page) never block the one writer; NORMAL sync is durable across a kill.
    # Two connections switching a new file to WAL at once can deadlock on its lock, and SQLite then answers
    # "database is locked" at once instead of waiting out the busy timeout (measured: about 1 in 350 opens of
    # a new store by six threads at once, as a sweep's units do): the switch is tried again until it is made.
    locked = retry_if_exception(lambda exc: isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc))
    for attempt in Retrying(retry=locked, stop=stop_after_delay(WAL_SWITCH_S), reraise=True,
                            wait=wait_exponential(multiplier=0.01, max=0.5)):
        with attempt:
            cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


RUN_NAME_META = "run_name"  # the run's name in releases (``run_name``)


def run_name(store, run_dir: str | Path, *, keep: bool = False) -> str:
    """The run's name in its releases' rows (``run_id``, the ``<id>@<run>`` of a clash): its folder's name
    when it was made, kept in its store, so that a run folder renamed or moved between two releases is
    still the run that made the first one (by its new folder's name, its item came back as a second copy,
    and an item removed from a release came back as newly accepted). A run made before the name was kept
    takes its folder's name now (``keep``: and keeps it)."""
    name = store.get_meta(RUN_NAME_META)
    if isinstance(name, str) and name:
        return name
    name = store.run_id or Path(run_dir).resolve().name
    if keep:
        store.set_meta(RUN_NAME_META, name)
    return name


SIM_ENDPOINTS_META = "sim_endpoints"  # a run's configured endpoints found serving the simulated world


def simulated_run(store) -> bool:
    """Whether the store's run is on the simulated world: the sim backend, or endpoints of `sim serve`
    behind a config (whose backend is called openai)."""
    return store.get_meta("backend") == "sim" or bool(store.get_meta(SIM_ENDPOINTS_META))


def check_store_url(url: str, where: str = "--store") -> None:
    """Refuse a store URL that is no SQLAlchemy URL or that carries a password, in one line naming
    ``where`` (the option or the file's field): every path that opens a store by a URL it was given
    (a run, a sweep's units, a sweep's Ray driver) checks it so, before anything is written."""
    if "://" not in url:  # shown unless it may hold user:password@ (no parser tells them apart here)
        shown = "" if "@" in url else f" {url!r}"
        # a SQLite file named as a path (as `memory list --store` takes one): the URL it means, said
        path = Path(url).expanduser()
        hint = (f"; for this SQLite file: sqlite:///{path.resolve()}" if "@" not in url and
                (path.is_file() or path.suffix in (".db", ".sqlite", ".sqlite3")) else "")
        raise ConfigError(f"{where}{shown}: expected a SQLAlchemy URL such as postgresql+psycopg://user@host/db"
                          + hint)
    if _has_password(url, where):
        raise ConfigError(
            f"{where}: the URL carries a password; leave it out and set PGPASSWORD (or ~/.pgpass) instead"
        )
    if _in_memory(url):
        raise ConfigError(f"{where}: {url!r} is a SQLite database in memory, gone when the run ends (nothing "
                          "resumes, review and release find nothing); name a file: sqlite:////abs/path/shared.db")


def _in_memory(url: str) -> bool:
    """A SQLite URL without a file (``sqlite://``), ``:memory:``, or a ``file:`` URI in memory."""
    parsed = make_url(url)  # a valid URL by now (_has_password parsed it)
    if parsed.get_backend_name() != "sqlite":
        return False
    db = parsed.database or ""
    return (db in ("", ":memory:") or db.startswith("file::memory:")
            or parsed.query.get("mode") == "memory" or "mode=memory" in db)


def _has_password(url: str, where: str = "--store") -> bool:
    """A password in the URL's user-info (``user:pw@``) or in its query string (``?password=``, libpq's
    ``sslpassword``, anything named like a secret: ``benchfill.redact.secret_params``)."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"{where}: not a SQLAlchemy URL ({exc})") from None
    return parsed.password is not None or bool(secret_params(url))


def _secrets_of(url: str) -> list[str]:
    """The secret values a store URL carries, to scrub from a driver's error (a URL given to ``Store``
    directly has not been through ``check_store_url``)."""
    from urllib.parse import parse_qsl

    try:
        password = make_url(url).password
    except Exception:  # noqa: BLE001  (no URL at all: nothing to take from it)
        password = None
    names = set(secret_params(url))
    query = url.split("?", 1)[1].split("#", 1)[0] if "?" in url else ""
    return [str(password or ""), *(v for k, v in parse_qsl(query) if k in names)]
