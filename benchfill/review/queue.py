"""The review queue: the records a run proposes for human review, read strictly.

A run writes ``review_queue.jsonl`` (format in docs/contracts.md). Everything
downstream (export, the review page, release) reads it through ``load_queue``
so a malformed record is reported once, with its file and line.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchfill.data import jsonl_objects
from benchfill.errors import DataError
from benchfill.redact import redact_url

QUEUE_FILE = "review_queue.jsonl"
REQUIRED = ("item_id", "ancestor_id", "ancestor", "child", "text_field", "answer_field")


@dataclass(frozen=True)
class QueueEntry:
    """One proposed item as the run described it; ``record`` keeps every field of the contract."""

    record: dict[str, Any]
    line: int

    @property
    def item_id(self) -> str:
        return str(self.record["item_id"])

    @property
    def child(self) -> dict[str, Any]:
        return self.record["child"]

    @property
    def ancestor(self) -> dict[str, Any]:
        return self.record["ancestor"]

    @property
    def text_field(self) -> str:
        return self.record["text_field"]

    @property
    def answer_field(self) -> str:
        return self.record["answer_field"]

    @property
    def flags(self) -> list[str]:
        return list(self.record.get("flags") or [])


def load_queue(run_dir: str | Path, store=None) -> list[QueueEntry]:
    """The run's review queue: from the store's selected candidates (in gap order) where the run
    recorded them there, else from ``review_queue.jsonl`` (runs made before), in file order; a
    missing queue or a malformed record is a ``DataError``."""
    if store is not None:
        entries = _from_store(store)
        if entries:
            return entries
    path = Path(run_dir) / QUEUE_FILE
    if not path.is_file():
        raise DataError(f"{path}: no review queue (has `benchfill run` finished for this run?)")
    entries: list[QueueEntry] = []
    seen: set[str] = set()
    for n, rec in jsonl_objects(path):
        for key in REQUIRED:
            if key not in rec:
                raise DataError(f"{path}:{n}: missing field '{key}'")
        for key in ("ancestor", "child"):
            if not isinstance(rec[key], dict):
                raise DataError(f"{path}:{n}: field '{key}' must be an object of item fields")
        if rec["item_id"] in seen:
            raise DataError(f"{path}:{n}: item_id '{rec['item_id']}' appears twice")
        seen.add(rec["item_id"])
        entries.append(QueueEntry(rec, n))
    return entries


_TOKEN = re.compile(r"\s+|[^\s]+")


def text_diff(old: str, new: str) -> list[tuple[str, str]]:
    """Word-level diff as ``(op, text)`` pieces, op in ``"="``, ``"-"``, ``"+"``.

    Whitespace is kept as its own token so that joining the "=" and "+" pieces gives
    back ``new`` exactly, and "=" with "-" gives back ``old``.
    """
    a, b = _TOKEN.findall(old or ""), _TOKEN.findall(new or "")
    out: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(("=", "".join(a[i1:i2])))
            continue
        if op in ("delete", "replace"):
            out.append(("-", "".join(a[i1:i2])))
        if op in ("insert", "replace"):
            out.append(("+", "".join(b[j1:j2])))
    return out


def marked_diff(old: str, new: str) -> str:
    """The diff as plain text in wdiff style, ``[-removed-]{+added+}``, for JSONL and spreadsheets."""
    parts = []
    for op, piece in text_diff(old, new):
        parts.append(piece if op == "=" else (f"[-{piece}-]" if op == "-" else f"{{+{piece}+}}"))
    return "".join(parts)


def _from_store(store) -> list[QueueEntry]:
    from benchfill.schema import Candidate

    rows = store.all(Candidate, Candidate.status == "selected", Candidate.review_json.is_not(None))  # type: ignore[union-attr]
    rows.sort(key=lambda r: (r.gap_index, r.id))
    entries = []
    for n, row in enumerate(rows, 1):
        try:
            record = json.loads(row.review_json)
        except json.JSONDecodeError as exc:
            raise DataError(f"store {redact_url(store.url)}: candidate {row.id}: review record is not JSON ({exc.msg})") from None
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            raise DataError(f"store {redact_url(store.url)}: candidate {row.id}: review record lacks {missing[0]!r}")
        entries.append(QueueEntry(record, n))
    return entries
