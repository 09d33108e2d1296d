"""The command line: a thin argparse layer over the library.

Each command group lives in its own module with a ``register(subparsers)``
function. Modules here import nothing heavy at module level, so that
``benchfill <cmd> --help`` starts fast; handlers import the library lazily.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import logging
import os
import signal
import sys
import threading
import warnings
from typing import Any

# Order is the order shown in --help.
COMMAND_MODULES = (
    "benchfill.cli.measure",  # fit, diagnose, calibrate
    "benchfill.cli.profile",  # profile (BSDProbe item profiles, order anomalies)
    "benchfill.cli.run",  # run
    "benchfill.cli.sweep",  # sweep (many benchmarks x strategies; local or Ray)
    "benchfill.cli.traffic",  # probes check / probes serve
    "benchfill.cli.sim",  # sim serve
    "benchfill.cli.review",  # review export / serve / import, release
    "benchfill.cli.memory",  # memory list / forget (the store's search memory)
    "benchfill.cli.detect",  # detect (localized-improvement test)
    "benchfill.cli.importers",  # import lm-eval / inspect
    "benchfill.cli.predict",  # predict train / evaluate / score / residuals
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="benchfill",
        description="Measure where a benchmark's items sit on the difficulty axis, fill its gaps, ship the result.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command group not built yet
            if exc.name != name:
                raise
            continue
        module.register(sub)
    _add_verbose(parser, top=True)
    return parser


def _add_verbose(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """``-v``/``--verbose`` on every (sub)command, before or after its name: benchfill's notices at INFO (a
    rewriter's reply repaired, a reply with no choices) as well as its warnings. Below the top level the
    flag sets nothing unless given, so that ``benchfill -v run`` is not undone by run's own default."""
    parser.add_argument("-v", "--verbose", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="also say benchfill's notices (logged at INFO), not only its warnings")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # (aliases name one parser twice)
                _add_verbose(child)


class _Said(logging.Formatter):
    """``benchfill: warning: ...`` for a warning (``note:`` for news at that level, ``errors.NOTE``),
    ``benchfill: ...`` for a notice (-v). The level is said here, once, so that the message itself carries
    none: a library caller's own handler showed ``WARNING:benchfill...:warning: ...`` for the few that did,
    and the CLI a bare line for the others."""

    def format(self, record: logging.LogRecord) -> str:
        said = super().format(record)
        if record.levelno < logging.WARNING:
            return f"benchfill: {said}"
        return f"benchfill: {'note' if getattr(record, 'benchfill_note', False) else 'warning'}: {said}"


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (a caller may have swapped it since)."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it: sys.stderr is read at each write instead
        pass


def _host_says(handler: logging.Handler) -> bool:
    """Whether a host's root handler shows records to someone at the terminal: a stream handler on a standard
    stream or a terminal, or a handler of a kind that draws (a rich console). One that keeps or sends them
    elsewhere (a file, a queue, a socket, syslog, pytest's capture) shows the operator nothing. Where one
    shows them, benchfill's own stderr line would say each record a second time."""
    import logging.handlers as lh

    if type(handler).__module__.startswith("_pytest") or isinstance(handler, (
            logging.FileHandler, logging.NullHandler, lh.QueueHandler, lh.SocketHandler, lh.SysLogHandler,
            lh.SMTPHandler, lh.HTTPHandler, lh.BufferingHandler, lh.NTEventLogHandler)):
        return False
    if isinstance(handler, logging.StreamHandler):
        stream = getattr(handler, "stream", None)
        if stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__):
            return True
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            return False
    return True


_PYTHONS_SHOW = warnings.showwarning


def _show_ours(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` while a command runs: a warning of benchfill's own classes as a log record."""
    if getattr(category, "__module__", "").startswith("benchfill."):
        logging.getLogger("benchfill").warning("%s", message)
    else:
        (_ACTIVE.get("showwarning") or _PYTHONS_SHOW)(message, category, filename, lineno, file, line)


_NOTICES = threading.Lock()
_ACTIVE: dict[str, Any] = {"depth": 0}  # commands running in this process (threads of a host) and what they set


@contextlib.contextmanager
def _notices(verbose: bool):
    """benchfill's log records on stderr as its other lines are written, ``benchfill: ...``, while commands
    run. Without it a warning reached the operator through Python's last-resort handler, unprefixed, and a
    notice at INFO never did. Where the host already shows log records (its own ``basicConfig``, a rich
    handler), it says them its way, once; records still reach every handler it set up (a log file, pytest's
    caplog). Commands that overlap in a host's threads share one handler, and the last to end
    puts the logger back as it was."""
    logger = logging.getLogger("benchfill")
    with _NOTICES:
        if _ACTIVE["depth"] == 0:
            _ACTIVE["level"] = logger.level
            said = any(_host_says(h) for h in logging.getLogger().handlers)
            _ACTIVE["handler"] = None if said else _Stderr()
            if _ACTIVE["handler"] is not None:
                _ACTIVE["handler"].setFormatter(_Said())
                logger.addHandler(_ACTIVE["handler"])
                # benchfill's own warning classes (a MAP fit that did not converge) in the same form: Python
                # printed them as "/path/engine.py:107: ConvergenceWarning: ...", with a line of source
                _ACTIVE["showwarning"] = warnings.showwarning
                warnings.showwarning = _show_ours
            if logger.level == logging.NOTSET and _ACTIVE["handler"] is not None:  # (a host's levels are its own)
                logger.setLevel(logging.WARNING)
        _ACTIVE["depth"] += 1
        if verbose:
            logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        with _NOTICES:
            _ACTIVE["depth"] -= 1
            if _ACTIVE["depth"] == 0:
                if _ACTIVE["handler"] is not None:
                    logger.removeHandler(_ACTIVE["handler"])
                    warnings.showwarning = _ACTIVE.pop("showwarning")
                logger.setLevel(_ACTIVE["level"])


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command parser ``args`` were parsed by: ``benchfill review import`` -> import's."""
    while True:
        chosen = next((a.choices[getattr(args, a.dest)] for a in parser._actions
                       if isinstance(a, argparse._SubParsersAction) and getattr(args, a.dest, None) in a.choices),
                      None)
        if chosen is None:
            return parser
        parser = chosen


class _VersionAction(argparse.Action):
    """Looks the version up only when asked: importlib.metadata costs ~30 ms on every start-up."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"benchfill {_version()}")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("benchfill")
    except PackageNotFoundError:
        return "0+unknown"


def _resumable(args) -> bool:
    """Whether a rerun of this command goes on where it stopped (``resumable``: a flag, or a test of the
    arguments, as for `release`, whose `verify` and `diff` have nothing to resume)."""
    said = getattr(args, "resumable", False)
    return bool(said(args) if callable(said) else said)


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:  # argparse's --help and --version end by SystemExit: flushed here too
            sys.stdout.flush()  # here, not at exit: a reader gone is then a BrokenPipeError this catches
    except BrokenPipeError:
        # The reader of our stdout stopped early (`| head`): say nothing more, and exit as a Unix tool
        # killed by SIGPIPE does (141), not 0 for output cut short. stdout goes to /dev/null first: the
        # interpreter flushes it at exit, and a flush into the closed pipe printed "Exception ignored".
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # no real stdout (a caller's capture): nothing to flush
            pass
        return 141


def _main(argv: list[str] | None) -> int:
    for stream in (sys.stdout, sys.stderr):
        # A terminal or pipe that is not UTF-8 (PYTHONIOENCODING=ascii, PYTHONUTF8=0 under LANG=C): "±", an
        # item id's "é" or a HumanEval text's arrow would stop the command mid-table with a traceback, after
        # its files were written; written as escapes instead
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if enc and enc != "utf8" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # litellm must never fetch its model cost map from the network.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if os.environ.get("BENCHFILL_LOOPBACK_ONLY"):
        from benchfill import netguard

        if netguard.enabled():
            netguard.install()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command they were given to, with its usage, not the top level's
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):  # no command: a usage error, said on stderr (stdout stays for results)
        parser.print_help(sys.stderr)
        return 2
    from benchfill.errors import BenchfillError, Terminated

    previous = _on_sigterm(hangup=getattr(args, "stop_on_hangup", False))
    try:
        with _notices(args.verbose):
            return int(args.func(args) or 0)
    except BenchfillError as exc:
        print(f"benchfill: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        again = "; rerun the same command to resume" if _resumable(args) else ""
        print(f"benchfill: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}{again}", file=sys.stderr)
        return 128 + exc.signum if isinstance(exc, Terminated) else 130
    except BrokenPipeError:
        raise  # main's
    except OSError as exc:
        # A file the user named that cannot be read or written (a folder where a file is wanted, a path
        # under a file, no permission): the user's to fix, so one line. The machine out of room or of file
        # descriptors is the user's too, whichever write or open met it (a write or close names no file).
        # Anything else without a file is a bug.
        again = "; rerun the same command to resume" if _resumable(args) else ""
        if exc.errno in _RESOURCES:
            where = f"{exc.filename}: " if exc.filename else ""
            print(f"benchfill: error: {where}{_RESOURCES[exc.errno]}; what was written before is kept{again}",
                  file=sys.stderr)
            return 2
        if exc.filename is None:
            raise
        where = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
        print(f"benchfill: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:
        again = "; rerun the same command to resume" if _resumable(args) else ""
        print(f"benchfill: error: out of memory (a limit such as ulimit -v, or the machine's){again}", file=sys.stderr)
        return 2
    except Exception as exc:
        line = _store_trouble(exc, getattr(args, "store", None))
        if line is None:
            raise
        again = "; what was written is kept: rerun the same command to resume once it answers" \
            if _resumable(args) and "stopped answering" in line else ""
        print(f"benchfill: error: {line}{again}", file=sys.stderr)
        return 2
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(sig, handler)


_RESOURCES = {
    errno.ENOSPC: "no space left on device: free some",
    errno.EDQUOT: "disk quota exceeded: free some of yours",
    errno.EMFILE: "too many open files (the process's limit, ulimit -n): raise it",
    errno.ENFILE: "too many open files on the machine",
}


def _store_trouble(exc: BaseException, url: str | None = None) -> str | None:
    """One line for a store that stopped answering mid-command (a PostgreSQL server stopped or unreachable,
    a SQLite file locked past its timeout, a full disk): the user's to fix, and a rerun resumes. Errors of
    the SQL itself (no such table, a syntax error) stay tracebacks: those are bugs."""
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is None or not isinstance(exc, sa_exc.DBAPIError):
        return None
    orig = exc.orig
    psycopg = sys.modules.get("psycopg")
    lost = exc.connection_invalidated or (psycopg is not None and isinstance(orig, psycopg.OperationalError))
    damaged = False
    if not lost and type(orig).__module__ == "sqlite3" and type(orig).__name__ == "OperationalError":
        lost = any(w in str(orig).lower() for w in ("locked", "disk", "unable to open", "readonly", "busy"))
    if not lost and type(orig).__module__ == "sqlite3" and type(orig).__name__ == "DatabaseError":
        # pages that opening the file did not read (the open itself refuses a damaged header in one line)
        damaged = any(w in str(orig).lower() for w in ("malformed", "not a database"))
    if not lost and not damaged:
        return None
    from benchfill.redact import redact_url, scrub

    said = scrub(" ".join(str(orig if orig is not None else exc).split()))
    store_mod = sys.modules.get("benchfill.store")
    opened = getattr(store_mod, "LAST_OPENED", None)
    which = (f"store {redact_url(url)}" if isinstance(url, str) and url
             else f"store {opened}" if opened else "the store")
    if damaged:
        return f"{which} is damaged ({said}); restore it from a copy, or start the run again with another --run-id"
    held = ", held by another process past the 30 s wait" if "locked" in said.lower() else ""
    return f"{which} stopped answering ({type(orig or exc).__name__}: {said}{held})"


def _terminated(signum, frame) -> None:
    from benchfill.errors import Terminated

    raise Terminated(signum)  # the exit status says which signal


def _on_sigterm(hangup: bool = False) -> dict:
    """Turn SIGTERM (and SIGHUP, for a command that asks: ``stop_on_hangup``) into ``Terminated`` for this
    command; returns the handlers to put back (none where signals cannot be set, as off the main thread).

    SIGHUP only where asked: an async command's SIGTERM goes through the event loop (netguard.run), and
    an exception raised from a handler could land in one of the loop's callbacks. Only where SIGHUP is
    left at its default: under nohup it is ignored, and stays so."""
    previous = {}
    sigs = [signal.SIGTERM]
    if hangup and hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:
        sigs.append(signal.SIGHUP)
    for sig in sigs:
        try:
            previous[sig] = signal.signal(sig, _terminated)
        except ValueError:
            break
    return previous
