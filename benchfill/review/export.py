"""The review queue as files: JSONL (full records) and CSV (for a spreadsheet), and back.

Reviewers who prefer a spreadsheet fill the decision columns of the CSV
(reviewer, decision, reason, edited_text, edited_answer, edited_options) and hand it to
``import_decisions``; empty decision cells are skipped.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchfill.data import check_header, long_csv_fields
from benchfill.errors import BenchfillError, DataError
from benchfill.review.board import ReviewBoard, hold_moment, moment_after, recorded_moments, same_decision
from benchfill.review.queue import QueueEntry, marked_diff
from benchfill.review.rule import Outcome, outcome, reviewer_key
from benchfill.schema import as_utc, now

DECISION_COLUMNS = ("reviewer", "decision", "reason", "edited_text", "edited_answer", "edited_options")
CSV_COLUMNS = (
    "item_id", "benchmark", "gap_index", "gap_left", "gap_right", "target_z",
    "ancestor_id", "ancestor_text", "child_text", "text_changes", "ancestor_answer", "child_answer",
    "text_as_edited", "answer_as_edited",  # the item as it stands where an edit is in force (else blank)
    "ancestor_options", "child_options", "ancestor_tests", "child_tests", "ancestor_entry_point", "child_entry_point",
    "annotated_difficulty", "annotated_se", "annotated_z",
    "confirmed_difficulty", "confirmed_se", "confirmed_z", "confirmed_z_se", "inside_probability", "ecdf_position",
    "probe_results", "judge_valid", "judge_reason", "rewriter_model", "judge_model", "flags",
    "simulated", "true_difficulty", "true_z", "status", "accepted_by", "rejected_by", "edited_by", "edited_to",
    "exported_at",
) + DECISION_COLUMNS  # fmt: skip
# The sheet's export time, on every row: a decision recorded elsewhere after it (the page, another sheet) is
# newer than anything the sheet can say, and import refuses to undo it.
EXPORTED_AT = "exported_at"


def review_record(entry: QueueEntry, standing: Outcome | None = None,
                  code: tuple[str, str] | None = None) -> dict[str, Any]:
    """One proposed item for a reviewer: the run's record plus texts side by side and the marked diff (and,
    for a code benchmark, ``code`` its (tests field, entry point field), each side's tests)."""
    rec = dict(entry.record)
    old_text = str(entry.ancestor.get(entry.text_field, ""))
    new_text = str(entry.child.get(entry.text_field, ""))
    rec["ancestor_text"] = old_text
    rec["child_text"] = new_text
    rec["text_changes"] = marked_diff(old_text, new_text)
    rec["ancestor_answer"] = entry.ancestor.get(entry.answer_field)
    rec["child_answer"] = entry.child.get(entry.answer_field)
    # a multiple-choice item's options, lettered, one a line: the key names one of them
    for side, item in (("ancestor", entry.ancestor), ("child", entry.child)):
        lines = entry.options(item)
        rec[f"{side}_options"] = None if lines is None else "\n".join(lines)
        # a code item's tests, which its reference answer must pass (and its entry point, when the tests call it)
        rec[f"{side}_tests"] = None if code is None else item.get(code[0])
        rec[f"{side}_entry_point"] = None if code is None else item.get(code[1])
    if standing is not None:
        rec["review"] = {
            "status": standing.status,
            "accepted_by": standing.accepted_by,
            "rejected_by": standing.rejected_by,
            "edited_by": standing.edited_by,
            # what the edit changed, not the whole edited item
            "edited_fields": {k: v for k, v in (standing.edited_fields or {}).items() if entry.child.get(k) != v}
            or None,
        }
    return rec


def _csv_row(rec: dict[str, Any]) -> dict[str, Any]:
    gap = rec.get("gap") or {}
    ann = rec.get("annotated") or {}
    conf = rec.get("confirmed") or {}
    judge = rec.get("judge") or {}
    review = rec.get("review") or {}
    probes = "; ".join(
        f"{p.get('probe')}: {p.get('correct')}/{p.get('trials')}"
        + (f" (ability {p['ability']:.2f})" if isinstance(p.get("ability"), int | float) else "")
        for p in rec.get("probe_results") or []
    )
    row = {
        "item_id": rec["item_id"], "benchmark": rec.get("benchmark", ""), "gap_index": rec.get("gap_index"),
        "gap_left": gap.get("left"), "gap_right": gap.get("right"), "target_z": rec.get("target_z"),
        "ancestor_id": rec["ancestor_id"], "ancestor_text": rec["ancestor_text"], "child_text": rec["child_text"],
        "text_changes": rec["text_changes"], "ancestor_answer": rec["ancestor_answer"],
        "child_answer": rec["child_answer"], "ancestor_options": rec.get("ancestor_options"),
        "child_options": rec.get("child_options"), "ancestor_tests": rec.get("ancestor_tests"),
        "child_tests": rec.get("child_tests"), "ancestor_entry_point": rec.get("ancestor_entry_point"),
        "child_entry_point": rec.get("child_entry_point"),
        "annotated_difficulty": ann.get("difficulty"), "annotated_se": ann.get("se"), "annotated_z": ann.get("z"),
        "confirmed_difficulty": conf.get("difficulty"), "confirmed_se": conf.get("se"),
        "confirmed_z": conf.get("z"), "confirmed_z_se": conf.get("placement_z_se"),
        "inside_probability": rec.get("inside_probability"),
        "ecdf_position": rec.get("ecdf_position"), "probe_results": probes,
        "judge_valid": judge.get("valid"), "judge_reason": judge.get("reason", ""),
        "rewriter_model": rec.get("rewriter_model", ""), "judge_model": rec.get("judge_model", ""),
        "flags": ";".join(rec.get("flags") or []), "simulated": rec.get("simulated", False),
        **_truth(rec), "status": f"removed: {review['removed']}" if review.get("removed") else review.get("status", ""),
        "accepted_by": ";".join(review.get("accepted_by", [])),
        "rejected_by": ";".join(review.get("rejected_by", [])),
        # the standing edit, which the item would be released as (child_text stays the queue's, by which
        # an import checks that a row is still its item)
        "edited_by": review.get("edited_by"),
        "edited_to": json.dumps(review["edited_fields"], ensure_ascii=False) if review.get("edited_fields") else "",
        # beside the rewriter's: a second reviewer read the wrong answer an edit had fixed, and accepted the edit
        **_as_edited(rec),
    }  # fmt: skip
    row.update({c: "" for c in DECISION_COLUMNS})
    return {k: _inert("" if v is None else v) for k, v in row.items()}


def _as_edited(rec: dict[str, Any]) -> dict[str, Any]:
    """The text and answer the item would be released with, where an edit in force changed them; blank
    where it did not (then child_text and child_answer are the item as it stands)."""
    edited = (rec.get("review") or {}).get("edited_fields") or {}
    text_field, answer_field = rec.get("text_field"), rec.get("answer_field")
    return {"text_as_edited": edited.get(text_field) if text_field in edited else None,
            "answer_as_edited": edited.get(answer_field) if answer_field in edited else None}


# A cell a spreadsheet would run as a formula (or DDE) when the reviewer opens the sheet: an LLM's text, or
# a benchmark's id, that starts so. Written with a leading apostrophe (OWASP's advice), read back without.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _inert(v: Any) -> Any:
    # Also before apostrophes that already lead to a formula's start ("'-'.join(xs)"), which _as_written would
    # otherwise read as the guard's and take off.
    return "'" + v if isinstance(v, str) and v.lstrip("'").startswith(FORMULA_START) else v


def _as_written(v: str) -> str:
    """A cell of the sheet as the queue holds it: the apostrophe ``_inert`` put before a formula's start
    taken off again (a spreadsheet that saved the cell may also have dropped it)."""
    return v[1:] if v.startswith("'") and v.lstrip("'").startswith(FORMULA_START) else v


def _truth(rec: dict[str, Any]) -> dict[str, Any]:
    """The simulated truth on the run's fitted scale, as the estimates beside it. A record written before
    holds it on the world's own scale only (no ``true_z``): left blank rather than mixed into the column."""
    if "true_z" not in rec:
        return {"true_difficulty": None, "true_z": None}
    return {"true_difficulty": rec.get("true_difficulty"), "true_z": rec.get("true_z")}


def export_queue(run_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Write ``review_queue.export.jsonl`` and ``review_queue.csv``; returns their paths.

    Default ``out_dir`` is ``<run>/review/``. Each file is written to a temp file and renamed. A
    ``review_queue.csv`` already there that holds decisions not yet imported is not overwritten: they
    would be lost (``DataError`` naming how many).
    """
    out = Path(out_dir) if out_dir else Path(run_dir) / "review"
    jsonl = out / "review_queue.export.jsonl"
    csv_path = out / "review_queue.csv"
    from benchfill.outputs import check_targets

    with ReviewBoard(run_dir) as board:  # first: a path that is no run is named as such
        check_targets(out, (jsonl, csv_path), what="the export", hint="export elsewhere with --out")
        if csv_path.is_file():
            _no_work_lost(csv_path)
            pending = _unimported(board, csv_path)
            if pending:
                raise DataError(f"{csv_path}: holds {pending} decision(s) not imported yet; import it first "
                                f"(benchfill review import {csv_path}) or move it away, then export again")
        # The moment, after every decision the store holds whatever this machine's clock says (the import's
        # guard against a stale sheet compares decisions' times with it: board.moment_after), taken, held and
        # the decisions read under the run folder's lock, as a release does: a decision recorded between the
        # reading and the moment had been stamped before the sheet's time, and the sheet overrode it unseen
        from benchfill import locks

        held = locks.hold(Path(run_dir))
        try:
            moment = moment_after(board.store)
            if not board.store.read_only:  # held, so that a decision on the page after it is stamped later
                hold_moment(board.store, moment)
            standing = board.outcomes()
        finally:
            locks.release(held)
        removed = board.removed(standing)
        code = board.code_fields()
        records = [review_record(e, standing[e.item_id], code) for e in board.entries]
        for rec in records:  # an item the latest release keeps out is said so, not "accepted"
            line = removed.get(rec["item_id"])
            if line is not None and rec["review"]["status"] == "accepted":
                rec["review"]["removed"] = line
        stamp = moment.isoformat(timespec="microseconds")
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(jsonl, lambda fh: fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records))

    def write_csv(fh) -> None:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows({**_csv_row(r), EXPORTED_AT: stamp} for r in records)

    # With a byte-order mark: Excel reads a CSV without one in the system's code page (cp1252 on Windows), so a
    # reviewer saw mojibake, and the import then refused the saved sheet as "re-sorted". Python reads it with
    # encoding="utf-8-sig", as the import does.
    _atomic_write(csv_path, write_csv, encoding="utf-8-sig")
    return jsonl, csv_path


def import_decisions(run_dir: str | Path, csv_file: str | Path, reviewer: str | None = None) -> int:
    """Record the decisions filled into an exported CSV; returns how many were recorded.

    The whole file is checked before anything is written, so a bad row changes nothing. A row is
    refused (``DataError`` naming its line) when it is cut short or too long, names an item whose
    ancestor or text is not the queue's (a re-sorted sheet), repeats an item and reviewer of an earlier
    row, fills an edit's cells under "accept" or "reject", or would undo a decision its reviewer made
    after the sheet was exported, on the page or in another sheet, or decides on an item whose edit in
    force changed since the export (another reviewer's edit, or the one it showed withdrawn: the page's
    check). A sheet made by hand (the columns
    item_id, reviewer, decision and any of the rest, no ``exported_at``) carries no export time: its rows
    may add decisions, never replace one its reviewer has recorded; a decided row of an exported sheet
    whose ``exported_at`` cell was cleared is refused. ``reviewer`` fills rows whose
    reviewer cell (or column) is empty. A row that repeats the reviewer's latest decision verbatim is
    skipped, so importing the same file twice is harmless; a sheet edited and imported again replaces
    what it said before.
    """
    path = Path(csv_file)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    # One import at a time per run: two imports of one sheet at once each read the decisions before the
    # other wrote, and both recorded every row (a flock on the run's folder: no lock file is left)
    from benchfill import locks

    held = locks.hold(Path(run_dir))
    try:
        return _import_held(run_dir, path, reviewer)
    finally:
        locks.release(held)


def _import_held(run_dir: str | Path, path: Path, reviewer: str | None) -> int:
    # and the store's turns: a page or an import served from another folder of the same store is not
    # held off by this folder's lock (Store.turns)
    with ReviewBoard(run_dir, writable=True) as board:
        # the sheet read (its edited code items run: seconds each) before the turn, which holds off every
        # run's decisions on a SQLite store; a decision landing meanwhile is one the checks below see
        rows, lines, exported = _read_sheet(board, path, reviewer)
        with board.store.turns("review"):
            return _record_sheet(board, path, reviewer, rows, lines, exported)


def _record_sheet(board: ReviewBoard, path: Path, reviewer: str | None, rows: list, lines: list[int],
                  exported: datetime | None) -> int:
    if exported is not None:
        _check_export_time(board, path, exported)
    sheet = f"sheet:{exported.isoformat()}" if exported else "sheet"
    # a reviewer is their name without regard to case or spacing, as the release rule counts them: "Alice" on a
    # sheet is the alice of the page, whose later decision the row must not undo
    latest = {(d.item_id, reviewer_key(d.reviewer)): d for d in board.decisions()}
    moved = _changed_since(board, exported, sheet, {(r.item_id, r.reviewer) for r in rows}) if exported else {}
    fresh = []
    for r, line in zip(rows, lines, strict=True):
        r.source = sheet
        prev = latest.get((r.item_id, reviewer_key(r.reviewer)))
        if prev is not None and same_decision(prev, r) and board.unchanged_since(r.item_id, prev, exported=exported):
            continue
        if r.decision == "edit" and _own_edit_in_force(board, r):
            continue  # the reviewer's own edit, still in force (their accept on the page since keeps it)
        if prev is not None and exported is None:
            # No export time (a sheet made by hand, or one whose column was cut): nothing shows it was
            # filled in after that decision, so it may add decisions but replace none.
            raise DataError(
                f"{path} line {line}: {r.reviewer} decided {prev.decision!r} on '{r.item_id}' at "
                f"{as_utc(prev.created_at).isoformat(timespec='seconds')} ({_where(prev.source)}), and this "
                f"sheet has no '{EXPORTED_AT}' column to show it was filled in after that; its {r.decision!r} "
                "would replace it. Make the change on the review page or in a freshly exported sheet "
                "(benchfill review export), or clear this row")
        if prev is not None and exported is not None and prev.source != sheet and as_utc(prev.created_at) > exported:
            raise DataError(
                f"{path} line {line}: {r.reviewer} decided {prev.decision!r} on '{r.item_id}' at "
                f"{as_utc(prev.created_at).isoformat(timespec='seconds')} ({_where(prev.source)}), after this "
                f"sheet was exported at {exported.isoformat(timespec='seconds')}; its {r.decision!r} would undo "
                "that. Export a fresh sheet, or clear this row")
        gone = board.removed_at(r.item_id) if exported is not None and r.decision in ("accept", "edit") else None
        if gone is not None and gone > exported:
            raise DataError(
                f"{path} line {line}: '{r.item_id}' was removed from a release at {gone.isoformat(timespec='seconds')}, "
                f"after this sheet was exported at {exported.isoformat(timespec='seconds')}, so its {r.decision!r} "
                "was made on the item as it stood before and would bring it back unseen. Export a fresh sheet "
                "(it shows the removal), or clear this row")
        if (r.item_id, r.reviewer) in moved and r.decision != "withdraw":
            raise DataError(
                f"{path} line {line}: '{r.item_id}' changed after this sheet was exported at "
                f"{exported.isoformat(timespec='seconds')} ({moved[r.item_id, r.reviewer]}), so its {r.decision!r} was "
                "made on the item as it stood before; the review page refuses the same. Export a fresh "
                "sheet, or clear this row")  # fmt: skip
        fresh.append(r)
    board.record(fresh)
    # this file, as it stands, holds nothing more to import: export may replace it (_unimported)
    sha = _sheet_sha256(path.read_bytes())
    done = [pair for pair in board.store.get_meta(IMPORTED_SHEETS, []) if pair[0] != sha]
    board.store.set_meta(IMPORTED_SHEETS, [*done, [sha, reviewer or ""]][-KEEP_SHEETS:])
    return len(fresh)


def _own_edit_in_force(board: ReviewBoard, row: Any) -> bool:
    """Is ``row``'s edit the one in force, by its own reviewer? Then it records nothing new."""
    now = board.outcome_of(row.item_id)
    return (now.edited_by is not None and reviewer_key(now.edited_by) == reviewer_key(row.reviewer)
            and now.edited_fields == json.loads(row.edited_json or "null"))


def _changed_since(board: ReviewBoard, exported: datetime, sheet: str,
                   pairs: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The (item, reviewer) pairs of ``pairs`` whose item's edit in force is not the one the sheet showed
    that reviewer (an edit made, or the edit it showed withdrawn, after ``exported``, other than by the
    reviewer's own earlier import of this sheet), each with what changed. A decision filled in on the sheet
    was made on the item as exported: the page's ``seen`` check, for a sheet. The exemption is the
    reviewer's own: one export copied to two reviewers carries one export time, and alice's import of her
    copy is a change bob's copy never showed."""
    on = board.decisions_by_item()
    queued = {e.item_id for e in board.entries}
    out: dict[tuple[str, str], str] = {}
    for item_id, reviewer in pairs:
        if item_id not in queued:
            continue  # not in the queue: _read_sheet names it
        mine = on.get(item_id, [])
        now = outcome(item_id, mine, board.rule)  # as ReviewBoard.outcomes has it
        then = [d for d in mine if as_utc(d.created_at) <= exported
                or (d.source == sheet and reviewer_key(d.reviewer) == reviewer_key(reviewer))]
        before = outcome(item_id, then, board.rule)
        if before.edited_fields != now.edited_fields:
            by = now.edited_by
            out[item_id, reviewer] = (f"the edit by {by} is now the one in force" if by
                                      else "the edit it showed was withdrawn")  # fmt: skip
    return out


def _read_sheet(board: ReviewBoard, path: Path, reviewer: str | None) -> tuple[list, list[int], datetime | None]:
    """The sheet's filled rows as prepared decisions, the line each starts on, and the export time."""
    rows, lines = [], []
    exported: datetime | None = None
    first_line: dict[tuple[str, str], int] = {}
    standing = None  # the queue's outcomes, read at the sheet's first edit
    shown = None  # the outcomes the sheet showed (at its export), read at the first row that shows an edit
    long_csv_fields()  # an edited code solution may pass csv's default 131,072 characters
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            fields = reader.fieldnames or []
            check_header(fields, str(path))  # a column twice: DictReader kept its last copy without a word
            need = ("item_id", "decision") if reviewer else ("item_id", "reviewer", "decision")
            missing = [c for c in need if c not in fields]
            if missing:
                hint = (" (the file is separated by ';': save it as comma-separated CSV)"
                        if fields and ";" in fields[0] else "")
                raise DataError(f"{path}: missing column(s) {', '.join(missing)}{hint}")
            start = reader.line_num + 1  # the header may span lines
            for n_row, row in enumerate(reader, start=1):
                line, start = start, reader.line_num + 1
                where = f"{path} line {line} (data row {n_row})"
                if None in row or any(v is None for v in row.values()):
                    got = len(fields) + len(row.get(None) or []) - sum(v is None for v in row.values())
                    raise DataError(f"{where}: {got} fields, the header has {len(fields)} (a row cut short or split?)")
                stamp = (row.get(EXPORTED_AT) or "").strip()
                if stamp:
                    exported = _stamp(stamp, where, exported)
                decision = (row.get("decision") or "").strip().lower()
                if not decision:
                    continue
                if EXPORTED_AT in fields and not stamp:  # an exported row's time, cleared: the guard's key
                    raise DataError(f"{where}: field '{EXPORTED_AT}' is empty; an exported sheet has its export "
                                    "time on every row, by which import refuses to undo a later decision. "
                                    "Fill your decisions into a freshly exported sheet (benchfill review export)")
                item_id = _as_written(row.get("item_id") or "").strip()
                who = (row.get("reviewer") or "").strip() or (reviewer or "")
                edit = decision == "edit"
                edited = [c for c in ("edited_text", "edited_answer", "edited_options") if (row.get(c) or "").strip()]
                if edited and not edit:
                    raise DataError(f"{where}: {' and '.join(edited)} filled, but the decision is {decision!r}; "
                                    "write 'edit' to record the edit, or clear them")
                try:
                    entry = board.entry(item_id)
                    as_edited = any((row.get(c) or "").strip() for c in ("text_as_edited", "answer_as_edited"))
                    if edit and standing is None:  # read once for the sheet, not once per row
                        standing = board.outcomes()
                    if as_edited and shown is None:
                        shown = _outcomes_at(board, exported)
                    _same_item(entry, row, shown[item_id] if as_edited else None)
                    rows.append(board.prepare(
                        item_id, who, decision, row.get("reason") or "",
                        text=(row.get("edited_text") or None) if edit else None,
                        answer=(row.get("edited_answer") or None) if edit else None,
                        outcome=standing[item_id] if edit else None,
                        options=(row.get("edited_options") or None) if edit else None,
                    ))  # fmt: skip
                except BenchfillError as exc:
                    raise DataError(f"{where}: {exc}") from None
                key = (item_id, reviewer_key(rows[-1].reviewer))
                if key in first_line:
                    raise DataError(f"{where}: a second decision by {rows[-1].reviewer} on '{item_id}' (the first is on line "
                                    f"{first_line[key]}); keep one")
                first_line[key] = line
                lines.append(line)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}); save it as 'CSV UTF-8'") from None
    except csv.Error as exc:
        raise DataError(f"{path}: malformed CSV ({exc})") from None
    return rows, lines, exported


def _same_item(entry: QueueEntry, row: dict[str, Any], standing: Outcome | None) -> None:
    """The row's cells that show the item must be the queue's: a sheet sorted on one column only moves
    decisions onto other items, and a fix typed into the item's own cells (rather than the edited_ ones)
    would be dropped while the decision beside it shipped the item unfixed. ``standing`` is the item's
    outcome now, by which the cells that show the edit in force are checked (None: read no such cell)."""
    ancestor = _as_written(row.get("ancestor_id") or "").strip()
    if ancestor and ancestor != str(entry.record["ancestor_id"]).strip():  # an id may end in a space or a tab
        raise BenchfillError(f"item '{entry.item_id}' has ancestor {entry.record['ancestor_id']!r} in the queue, "
                             f"the row says {ancestor!r} (a re-sorted sheet?)")
    text = _as_written(row.get("child_text") or "")
    if text and " ".join(text.split()) != " ".join(str(entry.child.get(entry.text_field, "")).split()):
        raise BenchfillError(f"item '{entry.item_id}': the row's child_text is not the queue's text of that item "
                             "(a re-sorted sheet? To change the text, write it in edited_text with decision 'edit')")
    lines = entry.options(entry.child)
    shown = {"child_answer": (entry.child.get(entry.answer_field), "edited_answer"),
             "child_options": (None if lines is None else "\n".join(lines), "edited_options")}
    if standing is not None:
        edit = standing.edited_fields or {}
        shown["text_as_edited"] = (edit.get(entry.text_field), "edited_text")
        shown["answer_as_edited"] = (edit.get(entry.answer_field), "edited_answer")
    for column, (value, field) in shown.items():
        cell = _as_written(row.get(column) or "")
        if cell.strip() and not _same_cell(cell, value):
            queue = (repr(str(value)[:60]) if value is not None
                     else "blank, no edit being in force" if column.endswith("_as_edited") else "blank")
            raise BenchfillError(f"item '{entry.item_id}': the row's {column} {cell.strip()[:60]!r} is not the "
                                 f"queue's ({queue}); to change it, write it in "
                                 f"{field} with decision 'edit', and restore or clear {column} (a spreadsheet that "
                                 "reformats numbers or dates may have changed it)")


def _outcomes_at(board: ReviewBoard, exported: datetime | None) -> dict[str, Outcome]:
    """Each queued item's outcome as the sheet showed it: by the decisions made by its export time (a sheet
    imported again shows the edit in force then, not one its own import or a later one put in force), or
    as it stands now for a sheet with no export time."""
    if exported is None:
        return board.outcomes()
    on = board.decisions_by_item()
    return {e.item_id: outcome(e.item_id, [d for d in on.get(e.item_id, []) if as_utc(d.created_at) <= exported],
                               board.rule) for e in board.entries}


def _same_cell(cell: str, value: Any) -> bool:
    """A cell the sheet wrote from ``value``, read back as a spreadsheet may have saved it: the same text up
    to whitespace, TRUE for true, or the same number to the digits the cell shows (0.50 saved as 0.5, a
    long number as 1.23457E+19, 0.30000000000000004 as 0.3)."""
    old = "" if value is None else str(value)
    if " ".join(cell.split()) == " ".join(old.split()) or cell.strip().lower() == old.strip().lower() in ("true", "false"):
        return True
    try:
        a, b = float(cell), float(old)
    except ValueError:
        return False
    if not (math.isfinite(a) and math.isfinite(b)):
        return a == b
    shown = len(re.sub(r"\D", "", re.split(r"[eE]", cell.strip())[0]).lstrip("0")) or 1  # its significant digits
    return a == b or a == float(f"{b:.{shown}g}")


# How far ahead of this machine's clock, and of every moment the store records, a sheet's export time may lie
# (another host's clock): every decision the sheet brings is stamped after it (board.moment_after).
EXPORT_SKEW = timedelta(minutes=5)


def _check_export_time(board: ReviewBoard, path: Path, exported: datetime) -> None:
    """Refuse an export time no export of this store can have written: a cell edited to 2099 stamped every
    later decision and release of the store in 2099."""
    latest = max([now(), *recorded_moments(board.store)])
    if exported > latest + EXPORT_SKEW:
        raise DataError(f"{path}: field '{EXPORTED_AT}' is {exported.isoformat(timespec='seconds')}, later than "
                        f"this machine's clock and every export and decision of the store "
                        f"({latest.isoformat(timespec='seconds')}): exported on a machine whose clock runs ahead, "
                        "or edited? Import it once the time has passed, or export a fresh sheet (from this run's "
                        "own folder) and copy the decisions into it")


def _stamp(text: str, where: str, seen: datetime | None) -> datetime:
    try:
        t = as_utc(datetime.fromisoformat(text))
    except ValueError:
        raise DataError(f"{where}: field '{EXPORTED_AT}' is not a time: {text!r}") from None
    if seen is not None and t != seen:
        raise DataError(f"{where}: field '{EXPORTED_AT}' differs from an earlier row's: rows of two exports mixed")
    return t


def _where(source: str) -> str:
    if source == "page":
        return "on the review page"
    if source.startswith("sheet"):
        return "in another sheet"
    return "through the library"


# run meta: [sha256 of a sheet file as it was imported, the --reviewer it was imported with], latest last
IMPORTED_SHEETS = "review/imported_sheets"
KEEP_SHEETS = 500


def _sheet_sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _no_work_lost(path: Path) -> None:
    """Refuse to overwrite a CSV at the sheet's place that is no review sheet (a file of the user's with
    another header), or a sheet with rows a reviewer began and has not decided (a reason or an edit typed,
    the decision cell empty): the export replaced them without a word."""
    long_csv_fields()
    try:
        rows = csv.DictReader(io.StringIO(path.read_bytes().decode("utf-8-sig"), newline=""))
        header = rows.fieldnames or []
        begun = sum(1 for row in rows if not (row.get("decision") or "").strip()
                    and any((row.get(c) or "").strip() for c in ("reason", "edited_text", "edited_answer",
                                                                  "edited_options")))
    except (UnicodeDecodeError, csv.Error):
        return  # (_unimported counts an unreadable file as holding work)
    if header and ";" in header[0] and "item_id" in header[0]:  # a sheet saved by a spreadsheet in a locale
        raise DataError(f"{path}: a review sheet separated by ';', which the export would replace; save it as "
                        "comma-separated CSV and import it, or move it away")
    if "item_id" not in header or "decision" not in header:
        raise DataError(f"{path}: not a review sheet (no item_id and decision columns), and the export would "
                        "replace it; move it away, or export elsewhere with --out")
    if begun:
        raise DataError(f"{path}: {begun} row(s) hold a reason or an edit with no decision yet (a review under "
                        "way); decide and import them, or move the sheet away, then export again")


def _unimported(board: ReviewBoard, path: Path) -> int:
    """How many filled decisions of the sheet at ``path`` an import could still record: as import reads them.

    A row is settled when its reviewer's latest decision says the same (import would skip it), or when that
    latest decision was made elsewhere after the sheet's export (import refuses to undo it, so the row cannot
    be recorded any more, and holding the export back for it would send the user from export to import and
    back). A row whose reviewer cell is empty takes the name ``--reviewer`` gives on import, which export
    cannot know: it is read with the name this very file (byte for byte) was last imported with, and
    counts as not imported where the file as it stands never was."""
    long_csv_fields()
    try:
        data = path.read_bytes()  # read once: its digest and its rows
        digest = _sheet_sha256(data)
        named = next((w for h, w in reversed(board.store.get_meta(IMPORTED_SHEETS, [])) if h == digest), None)
        rows = list(csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    except (UnicodeDecodeError, csv.Error):
        return 1  # unreadable as a sheet, yet filled in by someone: not ours to overwrite
    by_item: dict[str, list] = {}
    for d in board.decisions():
        by_item.setdefault(d.item_id, []).append(d)
    exported = None
    for row in rows:
        try:
            exported = as_utc(datetime.fromisoformat((row.get(EXPORTED_AT) or "").strip()))
            break
        except ValueError:
            continue
    sheet = f"sheet:{exported.isoformat()}" if exported else None
    filled = []
    for row in rows:
        decision = (row.get("decision") or "").strip().lower()
        if decision:
            filled.append((row, decision, (row.get("item_id") or "").strip(),
                           (row.get("reviewer") or "").strip() or (named or "")))  # fmt: skip
    # rows on an item edited by another since the export: import refuses them as it refuses a row that would
    # undo a later decision, so they are settled too (else export sends the user to import, and import back)
    moved = _changed_since(board, exported, sheet, {(i, w) for _, d, i, w in filled if w and d != "withdraw"}) \
        if exported is not None and sheet is not None else {}  # fmt: skip
    queued = {e.item_id for e in board.entries}
    # the items a release removed after the export, which import refuses rows on (a removal the sheet never showed)
    removed_since = {i for i in {x[2] for x in filled} if i in queued and exported is not None
                     and (t := board.removed_at(i, by_item.get(i, []))) is not None and t > exported}
    n = 0
    for row, decision, item_id, who in filled:
        prev = None
        for d in by_item.get(item_id, ()):  # oldest first: the reviewer's last one stands
            if reviewer_key(d.reviewer) == reviewer_key(who):
                prev = d
        if (item_id, who) in moved:
            continue
        if decision in ("accept", "edit") and item_id in removed_since:
            continue  # import refuses it: settled
        if not who or not _settled(board, row, who, prev, decision, sheet, exported):
            n += 1
    return n


def _settled(board: ReviewBoard, row: dict[str, Any], reviewer: str, prev, decision: str, sheet: str | None,
             exported: datetime | None) -> bool:
    """Would import leave this row of ``reviewer`` alone: their latest decision says the same, or was made
    elsewhere after the sheet's export (``import_decisions``'s own tests)?"""
    if prev is None:
        return False
    if exported is None:  # a sheet without an export time replaces no decision: import refuses it
        return True
    if prev.source != sheet and as_utc(prev.created_at) > exported:
        return True
    if prev.decision != decision:
        return False
    try:  # the reason and an edit's text count too, as import compares them
        edit = decision == "edit"
        new = board.prepare(prev.item_id, reviewer, decision, row.get("reason") or "",
                            text=(row.get("edited_text") or None) if edit else None,
                            answer=(row.get("edited_answer") or None) if edit else None,
                            options=(row.get("edited_options") or None) if edit else None)
    except BenchfillError:
        return decision == "withdraw"  # withdrawn already: nothing left to withdraw, nothing to record
    return same_decision(prev, new) and board.unchanged_since(prev.item_id, prev, exported=exported)


def _atomic_write(path: Path, write, encoding: str = "utf-8") -> None:
    from benchfill.outputs import named, shared_mode, temp_path

    tmp = temp_path(path.parent, path.name)  # a killed write's is removed by the next
    try:
        with open(tmp, "w", encoding=encoding, newline="") as fh:
            write(fh)
        os.chmod(tmp, shared_mode())  # mkstemp makes 0600; the queue goes to other reviewers
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            named(exc, path)
        raise
