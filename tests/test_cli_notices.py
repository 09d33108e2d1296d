"""The CLI says benchfill's log records on stderr, prefixed, for the command only; -v adds its notices."""

from __future__ import annotations

import logging

import pytest

from benchfill.cli import _notices, build_parser
from benchfill.errors import NOTE


@pytest.mark.parametrize("argv", [["-v", "fit", "--responses", "r.csv"], ["fit", "--responses", "r.csv", "-v"],
                                  ["review", "export", "RUN", "--verbose"]])
def test_verbose_is_taken_before_or_after_the_command(argv):
    assert build_parser().parse_args(argv).verbose is True


def test_a_command_without_the_flag_is_not_verbose_and_a_top_level_flag_survives_the_subcommand():
    parser = build_parser()
    assert parser.parse_args(["fit", "--responses", "r.csv"]).verbose is False
    assert parser.parse_args(["-v", "review", "export", "RUN"]).verbose is True


def test_warnings_are_prefixed_and_notices_need_verbose(capsys):
    log = logging.getLogger("benchfill.llm")
    before = logging.getLogger("benchfill").handlers[:]
    with _notices(verbose=False):
        log.warning("probe %s is slow", "p0")
        log.info("rewriter reply repaired")
        log.warning("probe %s answers again", "p0", extra=NOTE)  # news, at the level of the warning it ends
    err = capsys.readouterr().err
    # once, prefixed; the notice not said
    assert err == "benchfill: warning: probe p0 is slow\nbenchfill: note: probe p0 answers again\n"
    with _notices(verbose=True):
        log.info("rewriter reply repaired")
    assert capsys.readouterr().err == "benchfill: rewriter reply repaired\n"
    # nothing left behind for a host that calls main() in its own process
    assert logging.getLogger("benchfill").handlers == before
    assert logging.getLogger("benchfill").level == logging.NOTSET


def test_a_hosts_own_level_on_benchfills_logger_is_kept(capsys):
    logger = logging.getLogger("benchfill")
    logger.setLevel(logging.ERROR)
    try:
        with _notices(verbose=False):
            logging.getLogger("benchfill.fleet").warning("replica down")
        assert capsys.readouterr().err == ""  # the host silenced benchfill's warnings
        assert logger.level == logging.ERROR
    finally:
        logger.setLevel(logging.NOTSET)


def _said_beside(handler: logging.Handler, capsys, message: str) -> str:
    """What stderr shows of a warning logged while a command runs, with ``handler`` on the root logger."""
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with _notices(verbose=False):
            logging.getLogger("benchfill.run").warning(message)
        return capsys.readouterr().err
    finally:
        root.removeHandler(handler)


def test_a_host_that_configured_logging_sees_each_line_once_and_in_its_own_handlers(tmp_path, capsys):
    # basicConfig on the host, then cli.main: every warning was printed twice, benchfill's way and the host's;
    # and a host's log file must still get them
    import io

    class Console(logging.Handler):  # a handler that draws records itself (rich's): the host shows them
        def __init__(self):
            super().__init__()
            self.seen = []

        def emit(self, record):
            self.seen.append(record.getMessage())

    console = Console()
    assert _said_beside(console, capsys, "said by the host") == "" and console.seen == ["said by the host"]
    # a stream that is no terminal (a file opened by the host), a queue: the operator sees nothing there
    import queue
    from logging.handlers import QueueHandler

    elsewhere = logging.StreamHandler(io.StringIO())
    assert _said_beside(elsewhere, capsys, "kept") == "benchfill: warning: kept\n" and "kept" in elsewhere.stream.getvalue()
    assert _said_beside(QueueHandler(queue.Queue()), capsys, "queued") == "benchfill: warning: queued\n"
    # to stderr (as captured now): the host says benchfill's lines itself, once
    assert _said_beside(logging.StreamHandler(), capsys, "an item has no responses") == "an item has no responses\n"
    log_file = logging.FileHandler(tmp_path / "host.log")
    try:
        assert _said_beside(log_file, capsys, "another") == "benchfill: warning: another\n"
    finally:
        log_file.close()
    assert "another" in (tmp_path / "host.log").read_text()


def test_commands_overlapping_in_threads_leave_the_logger_as_it_was():
    import threading

    logger = logging.getLogger("benchfill")
    first_in, second_out = threading.Event(), threading.Event()

    def first():
        with _notices(verbose=False):
            first_in.set()
            second_out.wait(5)

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(5)
    with _notices(verbose=True):
        pass
    second_out.set()
    t.join()
    assert logger.level == logging.NOTSET and logger.propagate and not logger.handlers


def test_refusals_name_the_flags_under_the_cli_inside_a_running_event_loop(tmp_path, capsys):
    # main() called from a coroutine (a notebook) ran the command in a thread without the CLI's context: its
    # refusals named RunOptions' fields, not the flags typed
    import asyncio

    from benchfill.cli import main

    async def host():
        return main(["run", "--benchmark", "demo", "--children", "0", "--runs-dir", str(tmp_path), "--quiet"])

    assert asyncio.run(host()) == 2
    assert capsys.readouterr().err == "benchfill: error: --children: must be at least 1, got 0\n"


def test_benchfills_own_warning_classes_are_said_as_its_warnings(capsys):
    # A MAP fit that did not converge reached the terminal in Python's form: the file, the line, the class,
    # then a line of benchfill's source. Another library's warning is left to whoever showed warnings before.
    import warnings

    from benchfill.irt.map import ConvergenceWarning

    before = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with _notices(verbose=False):
            warnings.warn("MAP fit did not converge in 3 iterations", ConvergenceWarning, stacklevel=1)
            with pytest.warns(DeprecationWarning):  # (taken by pytest, not said as ours)
                warnings.warn("someone else's", DeprecationWarning, stacklevel=1)
    err = capsys.readouterr().err.splitlines()
    assert err == ["benchfill: warning: MAP fit did not converge in 3 iterations"]
    assert warnings.showwarning is before
