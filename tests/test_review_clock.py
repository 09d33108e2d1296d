"""Review and release keep the order in which things were recorded when the wall clock steps back.

Which came first, a decision or a release (or a removal, or a sheet's export), is read off their times. A
clock stepped back between two of them (NTP, a restored snapshot, two hosts with skewed clocks on one
store) had a reject made after a release counted as made before it, so the next release shipped the
rejected item; a reviewer's later decision lose to their earlier one; a stale sheet undo a later
decision; a release stamped an hour before the one it followed.
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.errors import DataError
from benchfill.release import release
from benchfill.review import ReviewBoard, export_queue, import_decisions


@pytest.fixture
def clock(monkeypatch):
    """``clock(hours)`` sets this process's wall clock that many hours off the true one: every time benchfill
    stamps (``benchfill.schema.now``, which the tables' defaults call too) and the release's own reading."""
    import benchfill.schema as schema

    real = datetime

    class Shifted(datetime):
        offset = timedelta(0)

        @classmethod
        def now(cls, tz=None):
            return real.now(tz) + cls.offset

    monkeypatch.setattr(schema, "datetime", Shifted)

    def shift(hours: float) -> None:
        Shifted.offset = timedelta(hours=hours)
    return shift


def test_a_reject_made_after_a_release_under_a_clock_stepped_back_removes_the_item(tmp_path, shared_data, clock,
                                                                                    capsys, caplog):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
        b.decide(CHILD_IDS[1], "ann", "accept")
    v1 = release(run, "1.0.0")
    assert sorted(v1.added) == sorted(CHILD_IDS[:2])
    clock(-1)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "bob", "reject", reason="answer key is wrong")
        # ann's later change of mind counts over her earlier accept
        b.decide(CHILD_IDS[1], "ann", "reject", reason="on second thought, ambiguous")
        assert b.outcomes()[CHILD_IDS[1]].status == "rejected"
    v2 = release(run, "1.1.0")
    assert sorted(v2.removed) == sorted(CHILD_IDS[:2]) and v2.carried == []
    # stamped after 1.0.0 (and said so), not an hour before it
    stamps = [(v.path / "manifest.json").read_text().split('"released_at_us": "')[1][:32] for v in (v1, v2)]
    assert stamps[0] < stamps[1], stamps
    said = [r.getMessage() for r in caplog.records if r.name == "benchfill.release"]
    assert any("this machine's clock is behind the store's latest decision or release" in m for m in said), said
    assert "clock" not in capsys.readouterr().err  # said through logging, which the host's handler prints
    # the changelog's date is the release's, in UTC, and says so
    assert f"### 1.1.0 ({stamps[1][:10]} UTC)" in (v2.path / "CHANGELOG.md").read_text()


def test_a_removed_item_is_not_brought_back_by_an_accept_stamped_ahead(tmp_path, shared_data, clock):
    run = make_run(tmp_path, shared_data)
    clock(2)  # alice's clock runs two hours ahead
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "alice", "accept")
    clock(0)
    release(run, "1.0.0")
    release(run, "1.1.0", remove={CHILD_IDS[0]: "carol: leaks the answer"})
    v3 = release(run, "1.2.0")
    assert CHILD_IDS[0] not in v3.added and v3.carried == []
    assert CHILD_IDS[0] not in (v3.path / "data" / "test.jsonl").read_text()
    assert "back after its removal" not in (v3.path / "CHANGELOG.md").read_text()


def _fill(sheet, decision: str, reviewer: str, reason: str = "") -> None:
    with open(sheet, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.DictReader(fh))
    fields = list(rows[0])
    for r in rows:
        if r["item_id"] == CHILD_IDS[0]:
            r.update(decision=decision, reviewer=reviewer, reason=reason)
    with open(sheet, "w", encoding="utf-8-sig", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def test_a_stale_sheet_cannot_undo_a_decision_imported_under_a_clock_stepped_back(tmp_path, shared_data, clock):
    run = make_run(tmp_path, shared_data)
    export_queue(run, tmp_path / "A")
    export_queue(run, tmp_path / "B")
    _fill(tmp_path / "B" / "review_queue.csv", "reject", "alice", "wrong key")
    clock(-1)
    assert import_decisions(run, tmp_path / "B" / "review_queue.csv") == 1
    clock(0)
    _fill(tmp_path / "A" / "review_queue.csv", "accept", "alice")
    with pytest.raises(DataError, match="after this sheet was exported"):
        import_decisions(run, tmp_path / "A" / "review_queue.csv")
    with ReviewBoard(run) as b:
        assert [(d.reviewer, d.decision) for d in b.decisions(CHILD_IDS[0])] == [("alice", "reject")]


def test_a_release_stamped_ahead_of_a_clock_stepped_back_still_counts_the_reject_that_follows(tmp_path, shared_data,
                                                                                               clock):
    # 1.0.0 is stamped after ann's accepts, ahead of this clock; bob's reject, made after it, had been stamped
    # exactly at that moment (the store's row kept the wall clock), counted as before it, and shipped
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
        b.decide(CHILD_IDS[1], "ann", "accept")
    clock(-1)
    release(run, "1.0.0")
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "bob", "reject", reason="answer key is wrong")
    v2 = release(run, "1.1.0")
    assert v2.removed == [CHILD_IDS[0]] and v2.carried == [CHILD_IDS[1]]


def test_a_page_decision_after_an_export_is_not_undone_by_that_sheet_under_a_clock_stepped_back(tmp_path,
                                                                                                shared_data, clock):
    run = make_run(tmp_path, shared_data)
    export_queue(run, tmp_path / "A")
    clock(-1)
    with ReviewBoard(run) as b:  # on the page, after the export, with the clock an hour behind it
        b.decide(CHILD_IDS[0], "alice", "reject", reason="wrong key", source="page")
    clock(0)
    _fill(tmp_path / "A" / "review_queue.csv", "accept", "alice")
    with pytest.raises(DataError, match="after this sheet was exported"):
        import_decisions(run, tmp_path / "A" / "review_queue.csv")


def test_an_export_time_no_export_wrote_is_refused(tmp_path, shared_data):
    # edited to 2099, it stamped every later decision and release of the store in 2099
    run = make_run(tmp_path, shared_data)
    export_queue(run, tmp_path / "A")
    sheet = tmp_path / "A" / "review_queue.csv"
    _fill(sheet, "accept", "alice")
    text = sheet.read_text(encoding="utf-8-sig")
    stamp = next(csv.DictReader(text.splitlines()))["exported_at"]
    sheet.write_text(text.replace(stamp, "2099-01-01T00:00:00+00:00"), encoding="utf-8-sig")
    with pytest.raises(DataError, match=r"field 'exported_at' is 2099-01-01T00:00:00\+00:00, later than this "
                                        r"machine's clock and every export and decision of the store"):
        import_decisions(run, sheet)
    with ReviewBoard(run) as b:
        assert b.decisions() == []
