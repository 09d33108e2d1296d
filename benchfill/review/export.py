"""The review queue as files: JSONL (full records) and CSV (for a spreadsheet), and back.

Reviewers who prefer a spreadsheet fill the decision columns of the CSV
(reviewer, decision, reason, edited_text, edited_answer) and hand it to
``import_decisions``; empty decision cells are skipped.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchfill.errors import BenchfillError, DataError
from benchfill.review.board import ReviewBoard
from benchfill.review.queue import QueueEntry, marked_diff
from benchfill.review.rule import Outcome

DECISION_COLUMNS = ("reviewer", "decision", "reason", "edited_text", "edited_answer")
CSV_COLUMNS = (
    "item_id", "benchmark", "gap_index", "gap_left", "gap_right", "target_z",
    "ancestor_id", "ancestor_text", "child_text", "text_changes", "ancestor_answer", "child_answer",
    "annotated_difficulty", "annotated_se", "annotated_z",
    "confirmed_difficulty", "confirmed_se", "confirmed_z", "confirmed_z_se", "inside_probability", "ecdf_position",
    "probe_results", "judge_valid", "judge_reason", "rewriter_model", "judge_model", "flags",
    "simulated", "true_difficulty", "status", "accepted_by", "rejected_by",
) + DECISION_COLUMNS  # fmt: skip


def review_record(entry: QueueEntry, standing: Outcome | None = None) -> dict[str, Any]:
    """One proposed item for a reviewer: the run's record plus texts side by side and the marked diff."""
    rec = dict(entry.record)
    old_text = str(entry.ancestor.get(entry.text_field, ""))
    new_text = str(entry.child.get(entry.text_field, ""))
    rec["ancestor_text"] = old_text
    rec["child_text"] = new_text
    rec["text_changes"] = marked_diff(old_text, new_text)
    rec["ancestor_answer"] = entry.ancestor.get(entry.answer_field)
    rec["child_answer"] = entry.child.get(entry.answer_field)
    if standing is not None:
        rec["review"] = {
            "status": standing.status,
            "accepted_by": standing.accepted_by,
            "rejected_by": standing.rejected_by,
            "edited_by": standing.edited_by,
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
        "child_answer": rec["child_answer"],
        "annotated_difficulty": ann.get("difficulty"), "annotated_se": ann.get("se"), "annotated_z": ann.get("z"),
        "confirmed_difficulty": conf.get("difficulty"), "confirmed_se": conf.get("se"),
        "confirmed_z": conf.get("z"), "confirmed_z_se": conf.get("placement_z_se"),
        "inside_probability": rec.get("inside_probability"),
        "ecdf_position": rec.get("ecdf_position"), "probe_results": probes,
        "judge_valid": judge.get("valid"), "judge_reason": judge.get("reason", ""),
        "rewriter_model": rec.get("rewriter_model", ""), "judge_model": rec.get("judge_model", ""),
        "flags": ";".join(rec.get("flags") or []), "simulated": rec.get("simulated", False),
        "true_difficulty": rec.get("true_difficulty"), "status": review.get("status", ""),
        "accepted_by": ";".join(review.get("accepted_by", [])),
        "rejected_by": ";".join(review.get("rejected_by", [])),
    }  # fmt: skip
    row.update({c: "" for c in DECISION_COLUMNS})
    return {k: ("" if v is None else v) for k, v in row.items()}


def export_queue(run_dir: str | Path, out_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Write ``review_queue.export.jsonl`` and ``review_queue.csv``; returns their paths.

    Default ``out_dir`` is ``<run>/review/``. Each file is written to a temp file and renamed.
    """
    with ReviewBoard(run_dir) as board:
        standing = board.outcomes()
        records = [review_record(e, standing[e.item_id]) for e in board.entries]
    out = Path(out_dir) if out_dir else Path(run_dir) / "review"
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "review_queue.export.jsonl"
    csv_path = out / "review_queue.csv"
    _atomic_write(jsonl, lambda fh: fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records))

    def write_csv(fh) -> None:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows(_csv_row(r) for r in records)

    _atomic_write(csv_path, write_csv)
    return jsonl, csv_path


def import_decisions(run_dir: str | Path, csv_file: str | Path, reviewer: str | None = None) -> int:
    """Record the decisions filled into an exported CSV; returns how many were recorded.

    The whole file is checked before anything is written, so a bad row changes nothing.
    ``reviewer`` fills rows whose reviewer cell is empty. A row that repeats the reviewer's
    latest decision verbatim is skipped, so importing the same file twice is harmless.
    """
    path = Path(csv_file)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with ReviewBoard(run_dir) as board:
        rows = []
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in ("item_id", "reviewer", "decision") if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"{path}: missing column(s) {', '.join(missing)}")
            for n_row, row in enumerate(reader, start=1):
                decision = (row.get("decision") or "").strip().lower()
                if not decision:
                    continue
                edit = decision == "edit"
                try:
                    rows.append(
                        board.prepare(
                            (row.get("item_id") or "").strip(),
                            (row.get("reviewer") or "").strip() or (reviewer or ""),
                            decision,
                            row.get("reason") or "",
                            text=(row.get("edited_text") or None) if edit else None,
                            answer=(row.get("edited_answer") or None) if edit else None,
                        )
                    )
                except BenchfillError as exc:
                    raise DataError(f"{path} line {reader.line_num} (data row {n_row}): {exc}") from None
        latest = {(d.item_id, d.reviewer): d for d in board.decisions()}
        fresh = []
        for r in rows:
            prev = latest.get((r.item_id, r.reviewer))
            if prev is not None and _same(prev, r):
                continue
            latest[(r.item_id, r.reviewer)] = r
            fresh.append(r)
        board.record(fresh)
        return len(fresh)


def _same(prev, new) -> bool:
    if (prev.decision, prev.reason) != (new.decision, new.reason):
        return False
    load = lambda s: None if s is None else json.loads(s)  # noqa: E731
    return load(prev.edited_json) == load(new.edited_json)


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            write(fh)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the queue goes to other reviewers
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
