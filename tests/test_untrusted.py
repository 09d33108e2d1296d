"""Untrusted text (ids, an LLM's output, a reviewer's reason, a run id) stays literal in Markdown benchfill
writes and in the terminal; checked on the renderers' own rules (CommonMark, GFM tables) by hand."""

from __future__ import annotations

import json
import re

import pytest
from test_report_scales import _rep
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main
from benchfill.untrusted import md_code, md_text, terminal

HOSTILE = "x|y\n## Injected <img src=x onerror=alert(1)> [a](javascript:x) *b* `c`"


def test_md_text_keeps_one_literal_line():
    out = md_text(HOSTILE)
    assert "\n" not in out and not re.search(r"(?<!\\)<img", out) and "\\<img" in out and "x\\|y" in out
    assert "\\[a\\](javascript:x)" in out and "\\*b\\*" in out and "\\`c\\`" in out
    assert md_text("HumanEval/127 demo-001 a&b") == "HumanEval/127 demo-001 a&amp;b"


def test_md_code_is_never_closed_from_inside():
    assert md_code("plain") == "`plain`"
    assert md_code("a`b``c") == "```a`b``c```"  # a fence longer than any run of backticks inside
    assert md_code("`x") == "`` `x ``"  # padded: a span may not start with its own fence's character
    assert md_code("a|b", table=True) == "`a\\|b`" and md_code("a\nb") == "`a b`"


def test_markdown_writes_controls_as_escapes_too():
    # report.md is read with cat as often as with a renderer: an id holding ESC ] 0; retitled the terminal
    hostile = "e25\x1b]0;pwned\x07t\u202eevil\x85x"
    for out in (md_text(hostile), md_code(hostile), md_code(hostile, table=True)):
        assert not re.search("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", out), out
    assert md_code(hostile) == "`e25\\x1b]0;pwned\\x07t\\u202eevil x`"  # NEL is a line break: one space
    assert "e25\\\\x1b\\]0;pwned" in md_text(hostile)  # the escape's own backslash escaped for Markdown


def test_terminal_writes_controls_as_escapes():
    assert terminal("a\x1b]0;pwn\x07\x1b[31mRED\u202eevil\nx") == "a\\x1b]0;pwn\\x07\\x1b[31mRED\\u202eevil\\nx"
    assert terminal("HumanEval/127 é") == "HumanEval/127 é"


def test_report_md_tables_keep_hostile_ids_in_their_cells():
    from benchfill.report import _markdown

    rep = _rep()
    rep["gaps"][0].update(chosen_id="c0", ancestor_id=HOSTILE)
    rep["gaps_before"][0].update(left_item="+cmd|' /C calc'!A0", right_item=None)
    md = _markdown(rep)
    rows = [line for line in md.splitlines() if line.startswith("| 0 |")]
    assert len(rows) == 2 and "## Injected" not in "\n".join(line for line in md.splitlines() if line.startswith("#"))
    for row in rows:  # as many cells as its header (5 or 10): no "|" of an id adds one
        cells = row.replace("\\|", "").count("|")
        assert cells in (5 + 1, 10 + 1), row
    assert "`+cmd\\|' /C calc'!A0` / end" in md


def test_a_reviewers_reason_and_a_run_id_cannot_write_the_card_or_changelog(tmp_path, shared_data):
    from benchfill.release import release
    from benchfill.review import ReviewBoard

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run, writable=True) as board:
        board.decide(CHILD_IDS[0], "ann", "accept")
    out = tmp_path / "rel"
    release(run, "1.0.0", out=out)
    with ReviewBoard(run, writable=True) as board:
        board.decide(CHILD_IDS[0], "mallory", "reject", "bad\n\n## Injected section\n\n<img src=x onerror=alert('c')>")
    second = release(run, "1.1.0", out=out)
    for name in ("README.md", "CHANGELOG.md"):
        text = (second.path / name).read_text()
        assert "## Injected" not in text and not re.search(r"(?<!\\)<img", text), name
    assert "rejected by mallory: bad \\#\\# Injected section \\<img src=x onerror=alert('c')\\>" in (
        second.path / "CHANGELOG.md").read_text()


@pytest.mark.parametrize("rid", ["r\n# INJECTED", "r\x1b[31m", "r\u202eexe"])
def test_a_run_id_with_a_control_character_is_refused(tmp_path, capsys, rid):
    assert main(["run", "--benchmark", "demo", "--backend", "sim", "--runs-dir", str(tmp_path), "--run-id", rid]) == 2
    err = capsys.readouterr().err
    assert "--run-id: a plain folder name (no '/', not '.' or '..', no control character)" in err
    assert err.count("\n") == 1 and not any(tmp_path.iterdir())


def test_diagnose_prints_an_id_with_an_escape_sequence_as_its_escape(tmp_path, capsys):
    rows = ["model,item_id,correct,trials"] + [f"m{j},{i},{int(j >= k)},1" for j in range(6)
                                              for k, i in enumerate(["a", "b\x1b[31mRED", "c", "d"])]
    f = tmp_path / "r.csv"
    f.write_text("\n".join(rows) + "\n")
    assert main(["diagnose", "--responses", str(f), "--k", "5", "--json"]) == 0
    gaps = json.loads(capsys.readouterr().out)["gaps"]
    assert "b\x1b[31mRED" in {g["left_item"] for g in gaps} | {g["right_item"] for g in gaps}  # the data, as it is
    assert main(["diagnose", "--responses", str(f), "--k", "5"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "b\\x1b[31mRED" in out
