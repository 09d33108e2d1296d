"""``benchfill memory list | forget``: what a store's search memory holds, and dropping one run's children
from it (docs/memory.md, "Looking after the memory")."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "memory", help="what a store's search memory holds (list), or drop one run's children from it (forget)",
        description="The search memory: every annotated item of a benchmark, kept in the store for later runs "
                    "(docs/memory.md).",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="per benchmark and run: entries, their world, confirmed, may parent")
    _store_args(ls)
    ls.add_argument("--json", action="store_true", help="the rows as JSON")
    ls.set_defaults(func=handle_list)
    fg = sub.add_parser("forget", help="remove one run's children from the memory (its own gaps and review stay)")
    _store_args(fg)
    fg.add_argument("--run", required=True, metavar="RUN_ID", help="the run whose children to forget (memory list "
                                                                  "names them)")
    fg.add_argument("--dry-run", action="store_true", help="say how many entries would go; remove nothing")
    fg.set_defaults(func=handle_forget)


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, metavar="URL|FILE|RUN_DIR",
                   help="a shared store's SQLAlchemy URL or SQLite file, or a run directory (its own store)")
    p.add_argument("--benchmark", metavar="NAME", help="this benchmark's entries only (default: every one)")


def _open(where: str, writable: bool):
    from pathlib import Path

    from benchfill.errors import ConfigError
    from benchfill.store import Store, check_store_url, open_run_store

    path = Path(where)
    if "://" not in where and path.is_dir():
        return open_run_store(path, create=False, writable=writable)
    if "://" in where:
        check_store_url(where)
        from sqlalchemy.engine import make_url

        db = make_url(where).database if where.startswith("sqlite") else None
        if db is not None and not Path(db).is_file():  # opening it would make an empty database
            raise ConfigError(f"--store {where}: no such SQLite file")
    elif not path.is_file():
        raise ConfigError(f"--store {where}: no such file or run directory")
    # create False: a look makes no store of an empty file, nor writes to another application's database
    return Store(where, writable=writable, create=False)


def handle_list(args: argparse.Namespace) -> int:
    from benchfill.engine.memory_store import memory_contents

    store = _open(args.store, writable=False)
    try:
        rows = memory_contents(store, args.benchmark)
    finally:
        store.close()
    if args.json:
        from benchfill.cli.output import dumps

        # a run's own store keeps its rows under no run id: named by its folder, as the table names them
        own = _own_name(args.store)
        own = "" if own.startswith("(") else own  # a folder's name, or nothing: not the table's placeholder
        print(dumps([{**r, "run_id": r["run_id"] or own} if r["origin"] != "original" else r for r in rows],
                    indent=1))
        return 0
    if not rows:
        print(f"{store.where}: the memory holds nothing" + (f" of {args.benchmark}" if args.benchmark else ""))
        return 0
    from benchfill import untrusted

    print(f"{'benchmark':<16} {'run':<28} {'world':<9} {'entries':>7} {'confirmed':>9} {'may parent':>10} {'fits':>4}")
    for r in rows:
        run = "(its own items)" if r["origin"] == "original" else untrusted.terminal(r["run_id"] or _own_name(args.store))
        print(f"{untrusted.terminal(r['benchmark']):<16} {run:<28} {r['world']:<9} {r['entries']:>7} "
              f"{r['confirmed'] if r['origin'] != 'original' else '-':>9} "
              f"{r['may_parent'] if r['origin'] != 'original' else '-':>10} {r['scales']:>4}")
    return 0


def handle_forget(args: argparse.Namespace) -> int:
    from benchfill.engine.memory_store import forget_run, memory_contents
    from benchfill.errors import ConfigError

    store = _open(args.store, writable=not args.dry_run)
    try:
        # a run's own store keeps its rows under no run id (its folder may be renamed): named by its folder
        run = "" if args.run in (_own_name(args.store), "") else args.run
        # a dry run writes nothing, so a run in progress does not stop it: it says the forget would be refused
        let_go = _hold_run_of(args.store, store, run, args.run, refuse=not args.dry_run)
        try:
            n = forget_run(store, run, args.benchmark, dry_run=args.dry_run)
        finally:
            if let_go is not None:
                let_go()
        if not n:
            runs = sorted({r["run_id"] or _own_name(args.store)
                           for r in memory_contents(store, args.benchmark) if r["origin"] == "generated"})
            shown = ", ".join(runs[:8]) + (" ..." if len(runs) > 8 else "")
            raise ConfigError(f"--run {args.run}: no children of that run in the memory of {store.where}"
                              + (f" for {args.benchmark}" if args.benchmark else "")
                              + (f" (runs there: {shown})" if runs else " (it holds no run's children)")
                              # (a run that has not finished a gap yet has none: the user must not take it
                              # for a run that is not there, and forget it while it works)
                              + ("; that run is in progress (another process holds it), and writes its "
                                 "children as its gaps end" if let_go is None else ""))
    finally:
        store.close()
    verb = "would forget" if args.dry_run else "forgot"
    print(f"{verb} {n} entr{'y' if n == 1 else 'ies'} of run {args.run}"
          + (f" ({args.benchmark})" if args.benchmark else "")
          + ("; that run is in progress (another process holds it), so forget would be refused until it ends"
             if let_go is None else ""))
    return 0


def _hold_run_of(where: str, store, run: str, name: str, refuse: bool = True):
    """Hold the run whose children are to go, as the run itself holds it while it works, or refuse: a running
    run writes each finished gap's children to the memory again, so a forget during it was undone by the
    time the run ended, after saying it forgot them. Returns the function that lets go; None where the run
    is in progress and ``refuse`` is False (a dry run)."""
    import copy
    from pathlib import Path

    from benchfill import locks
    from benchfill.errors import ConfigError
    from benchfill.run import LOCK_FILE

    busy = ConfigError(f"--run {name}: that run is in progress (another process holds it); it writes each finished "
                       "gap's children to the memory again, so forget them once it ends")  # fmt: skip
    if run == "":  # a run's own store: the run holds its folder's lock file
        if "://" in where:
            from sqlalchemy.engine import make_url

            where = make_url(where).database or ""
        folder = Path(where) if Path(where).is_dir() else Path(where).parent
        if not (folder / LOCK_FILE).is_file():
            return lambda: None  # no run ever held it (or a benchfill before the lock)
        try:
            fd = locks.hold(folder / LOCK_FILE, wait=False)
        except BlockingIOError:
            if not refuse:
                return None
            raise busy from None
        return lambda: locks.release(fd)
    other = copy.copy(store)  # the same database, under the run's id: its hold is the run's (Store.hold_run)
    other.run_id = run
    try:
        return other.hold_run(exclusive=True)
    except ConfigError:
        if not refuse:
            return None
        raise busy from None


def _own_name(where: str) -> str:
    """A run's own store keeps its children under no run id: they are its folder's, named as a run folder,
    its store.db, or a sqlite URL of that file."""
    from pathlib import Path

    if where.startswith("sqlite") and "://" in where:
        from sqlalchemy.engine import make_url

        where = make_url(where).database or ""
    elif "://" in where:
        return "(a run's own store)"
    path = Path(where).resolve()
    if path.is_dir():
        return path.name
    return path.parent.name if path.name == "store.db" else "(a run's own store)"
