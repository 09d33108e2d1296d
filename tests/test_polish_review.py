"""Review and release input checks: a version's bounds, blank edits, a reason's control characters, a closed board."""

from __future__ import annotations

import httpx
import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main
from benchfill.errors import BenchfillError, ConfigError
from benchfill.release import release
from benchfill.review import ReviewBoard
from benchfill.review.board import _blank
from benchfill.review.server import ReviewServer


def test_a_huge_version_is_refused_so_later_ones_are_not_blocked(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    with pytest.raises(ConfigError, match=r"^version '999999999.0.0': its major \(X\) number is over 9999"):
        release(run, "999999999.0.0")
    with pytest.raises(ConfigError, match=r"its patch \(Z\) number is over 9999"):
        release(run, "1.0." + "9" * 5000)  # past Python's own limit on int() of a string: said, not a ValueError
    with pytest.raises(ConfigError, match=r"characters, over 64$"):
        release(run, "1.0.0-" + "a" * 80)
    assert main(["release", str(run), "--version", "1.99999.0"]) == 2
    err = capsys.readouterr().err
    assert "minor (Y) number is over 9999" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "releases" / "aime24").exists() or not any((tmp_path / "releases" / "aime24").iterdir())
    assert release(run, "2025.6.30").version == "2025.6.30"  # a date fits
    assert release(run, "2025.7.1").version == "2025.7.1"


@pytest.mark.parametrize("blank", ["\x00", "\x00\x00 \n", "\u200b", " \ufeff\u200d\t", "\u202e"])
def test_an_edit_of_only_invisible_characters_is_empty(tmp_path, shared_data, blank):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as board:
        with pytest.raises(BenchfillError, match="edited text is empty"):
            board.decide(CHILD_IDS[0], "ann", "edit", text=blank)
        with pytest.raises(BenchfillError, match="edited answer is empty"):
            board.decide(CHILD_IDS[0], "ann", "edit", answer=blank)
        assert board.decisions() == []


def test_a_reason_with_a_control_character_is_refused_in_the_library_and_on_the_page(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as board:
        for bad in ("wrong\x1b]0;owned\x07", "\x00", "see \u202eevil"):
            with pytest.raises(BenchfillError, match="field 'reason' holds a control character"):
                board.decide(CHILD_IDS[1], "ann", "reject", reason=bad)
            with pytest.raises(BenchfillError, match="field 'reason' holds a control character"):
                board.decide(CHILD_IDS[0], "ann", "accept", reason=bad)
        with pytest.raises(BenchfillError, match="'reason' is required"):
            board.decide(CHILD_IDS[1], "ann", "reject", reason="\u200b")
        # a spreadsheet cell's line breaks and tabs are text
        board.decide(CHILD_IDS[1], "ann", "reject", reason="two answers fit:\r\n12\tand 13")
    with ReviewServer(run) as srv:
        r = httpx.post(f"http://127.0.0.1:{srv.port}/api/decision", headers={"X-Benchfill-Token": srv.token},
                       json={"item_id": CHILD_IDS[2], "reviewer": "bob", "decision": "reject", "reason": "x\x1b[2J"})
        assert r.status_code == 400 and "field 'reason' holds a control character (x\\x1b[2J)" in r.json()["error"]
    with ReviewBoard(run) as board:
        assert [d.item_id for d in board.decisions()] == [CHILD_IDS[1]]


def test_a_closed_board_refuses_use_and_closes_twice(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    board = ReviewBoard(run)
    board.close()
    board.close()  # idempotent
    for use in (lambda: board.decide(CHILD_IDS[0], "ann", "accept"), board.decisions, board.outcomes,
                lambda: board.entry(CHILD_IDS[0]), lambda: board.benchmark, lambda: board.__enter__()):
        with pytest.raises(ConfigError, match="review board of .* is closed"):
            use()
    with ReviewBoard(run) as again:
        assert again.decisions() == []  # nothing was recorded through the closed one


def test_a_version_ending_in_a_line_break_is_no_version(tmp_path, shared_data):
    # "1.0.0\n" (a VERSION file read whole) matched the pattern's $, was released under a folder of that name,
    # and 1.0.0 was then refused as not newer than it
    run = make_run(tmp_path, shared_data)
    for bad in ("1.0.0\n", "1.0.0-rc.1\n", "1.0.0+build\n"):
        with pytest.raises(ConfigError, match="not a semantic version|semantic"):
            release(run, bad)
    assert not (tmp_path / "releases").exists() or not any((tmp_path / "releases").rglob("manifest.json"))
    assert release(run, "1.0.0").version == "1.0.0"


@pytest.mark.parametrize("blank", ["\u3164", "\u115f\u1160", "\uffa0 ", "\u034f", "\u17b4\u17b5", "\u2800",
                                   "\ufe0f", "\U000e0100", "\u180b"])
def test_an_edit_of_letters_and_marks_that_show_nothing_is_empty(tmp_path, shared_data, blank):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as board:
        with pytest.raises(BenchfillError, match="edited answer is empty"):
            board.decide(CHILD_IDS[0], "ann", "edit", answer=blank)
        assert board.decisions() == []
    # ... while a visible character beside them is text
    assert not _blank("\u3164x") and not _blank("\u1100")  # (U+1100: a Hangul letter that shows)


@pytest.mark.parametrize("kept", [{"min_accepts": 0}, {"bogus": 1}, {"min_accepts": "two"}])
def test_a_kept_release_rule_that_cannot_be_read_is_one_line_and_leaves_no_store_open(tmp_path, shared_data, kept,
                                                                                      monkeypatch):
    # ReleaseRule(**stored) raised past the constructor, its store left open (and a TypeError a traceback)
    import benchfill.review.board as board_mod
    from benchfill.store import open_run_store

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run, writable=True) as board:
        board.store.set_meta("release_rule", kept)
    closed = []

    def spy(*a, **kw):
        store = open_run_store(*a, **kw)
        real = store.close

        def close() -> None:
            closed.append(True)
            real()

        store.close = close
        return store

    monkeypatch.setattr(board_mod, "open_run_store", spy)
    with pytest.raises(ConfigError, match=r"the release rule kept with the run cannot be read \(.*\); the store was "
                       r"edited by hand\?$"):
        ReviewBoard(run)
    assert closed == [True]


def test_an_edited_option_of_a_label_alone_is_no_option(tmp_path, shared_data):
    # "B. " and "C. " followed by a filler were kept as empty options: the label is off before the blank check
    from test_review_server import _multiple_choice

    run = make_run(tmp_path, shared_data)
    _multiple_choice(run)
    with ReviewBoard(run) as board:
        item = board.entries[0]
        for lines in ("A. one\nB. \nC. \u3164", "A. one\nB.\n\u200b"):
            with pytest.raises(BenchfillError, match="edited options must be two or more"):
                board.decide(item.item_id, "ann", "edit", options=lines)
        assert board.decisions() == []


def test_a_version_in_another_scripts_digits_is_no_version(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with pytest.raises(ConfigError, match="not a semantic version"):
        release(run, "1\u0661.0.0")  # an Arabic-Indic one: sorted as 11.0.0 under a look-alike folder
