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

from benchfill.data import CHOICE_FIELDS, jsonl_objects, options_of
from benchfill.errors import DataError
from benchfill.redact import redact_url

QUEUE_FILE = "review_queue.jsonl"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # an option's letter, as the solver's prompt gives it
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
    def options_field(self) -> str | None:
        """Where a multiple-choice item keeps its options: the run's spec (``options_field`` of the record),
        else, for a queue written before it was recorded, the first of the usual fields the ancestor holds as
        options. None for an item with no options."""
        named = self.record.get("options_field")
        if isinstance(named, str) and named:
            return named if options_of(self.ancestor.get(named)) is not None else None
        return next((f for f in CHOICE_FIELDS if options_of(self.ancestor.get(f)) is not None), None)

    def options(self, item: dict[str, Any]) -> list[str] | None:
        """``item``'s options as lines, "A. text", in their order (None where the item has none)."""
        field = self.options_field
        opts = None if field is None else options_of(item.get(field))
        return None if opts is None else [f"{LETTERS[k] if k < len(LETTERS) else k + 1}. {o}" for k, o in enumerate(opts)]

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
        if store is not None and _finished(store):  # every gap done, none chose an item: nothing to review
            return []
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


# SequenceMatcher (autojunk off, so that whitespace is matched like any token) takes time quadratic in the
# tokens: 11 s for one 50,000-character item. Up to this many tokens (both texts together) a stretch is
# diffed by it whole, as always; a longer one is first cut at the words found once in each text, in the
# same order (patience diff), and the pieces between those anchors are diffed alike.
EXACT_TOKENS = 3000


def text_diff(old: str, new: str) -> list[tuple[str, str]]:
    """Word-level diff as ``(op, text)`` pieces, op in ``"="``, ``"-"``, ``"+"``.

    Whitespace is kept as its own token so that joining the "=" and "+" pieces gives
    back ``new`` exactly, and "=" with "-" gives back ``old``. Between two "=" pieces there
    is at most one "-" followed by at most one "+". Time grows about linearly with long texts
    (``EXACT_TOKENS``); a long stretch with no word found once in each is marked replaced whole.
    """
    a, b = _TOKEN.findall(old or ""), _TOKEN.findall(new or "")
    ops: list[tuple[str, int, int, int, int]] = []
    _opcodes(a, b, 0, len(a), 0, len(b), ops)
    out: list[tuple[str, str]] = []
    gone: list[str] = []
    came: list[str] = []

    def flush() -> None:
        if gone:
            out.append(("-", "".join(gone)))
        if came:
            out.append(("+", "".join(came)))
        gone.clear()
        came.clear()

    for op, i1, i2, j1, j2 in ops:
        if op == "equal":
            flush()
            if out and out[-1][0] == "=":
                out[-1] = ("=", out[-1][1] + "".join(a[i1:i2]))
            else:
                out.append(("=", "".join(a[i1:i2])))
            continue
        gone.extend(a[i1:i2])
        came.extend(b[j1:j2])
    flush()
    return out


def _opcodes(a: list[str], b: list[str], alo: int, ahi: int, blo: int, bhi: int,
             out: list[tuple[str, int, int, int, int]]) -> None:
    """SequenceMatcher's opcodes of a[alo:ahi] against b[blo:bhi], in bounded time (``EXACT_TOKENS``)."""
    if (ahi - alo) + (bhi - blo) <= EXACT_TOKENS:
        _exact(a, b, alo, ahi, blo, bhi, out)
        return
    while alo < ahi and blo < bhi and a[alo] == b[blo]:  # the common ends, cheaply
        out.append(("equal", alo, alo + 1, blo, blo + 1))
        alo, blo = alo + 1, blo + 1
    tail = []
    while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
        ahi, bhi = ahi - 1, bhi - 1
        tail.append(("equal", ahi, ahi + 1, bhi, bhi + 1))
    if (ahi - alo) + (bhi - blo) <= EXACT_TOKENS or alo == ahi or blo == bhi:
        _exact(a, b, alo, ahi, blo, bhi, out)
    else:
        anchors = _anchors(a, b, alo, ahi, blo, bhi)
        if not anchors:
            out.append(("replace", alo, ahi, blo, bhi))
        else:
            i, j = alo, blo
            for ai, bj in anchors:
                _opcodes(a, b, i, ai, j, bj, out)
                out.append(("equal", ai, ai + 1, bj, bj + 1))
                i, j = ai + 1, bj + 1
            _opcodes(a, b, i, ahi, j, bhi, out)
    out.extend(reversed(tail))


def _exact(a: list[str], b: list[str], alo: int, ahi: int, blo: int, bhi: int,
           out: list[tuple[str, int, int, int, int]]) -> None:
    matcher = difflib.SequenceMatcher(a=a[alo:ahi], b=b[blo:bhi], autojunk=False)
    out.extend((op, alo + i1, alo + i2, blo + j1, blo + j2) for op, i1, i2, j1, j2 in matcher.get_opcodes()
               if i1 < i2 or j1 < j2)


def _anchors(a: list[str], b: list[str], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """The longest run, in order in both, of the tokens found exactly once in a[alo:ahi] and once in
    b[blo:bhi] (patience diff's anchors)."""
    import bisect
    from collections import Counter

    count_a, count_b = Counter(a[alo:ahi]), Counter(b[blo:bhi])
    at_b = {b[j]: j for j in range(blo, bhi) if count_b[b[j]] == 1 and count_a[b[j]] == 1}
    pairs = [(i, at_b[a[i]]) for i in range(alo, ahi) if a[i] in at_b]
    # longest increasing subsequence of the b positions (patience sorting)
    tops: list[int] = []
    top_at: list[int] = []
    back = [-1] * len(pairs)
    for n, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tops, j)
        if k == len(tops):
            tops.append(j)
            top_at.append(n)
        else:
            tops[k], top_at[k] = j, n
        back[n] = top_at[k - 1] if k else -1
    chain = []
    n = top_at[-1] if top_at else -1
    while n >= 0:
        chain.append(pairs[n])
        n = back[n]
    return chain[::-1]


def marked_diff(old: str, new: str) -> str:
    """The diff as plain text in wdiff style, ``[-removed-]{+added+}``, for JSONL and spreadsheets."""
    parts = []
    for op, piece in text_diff(old, new):
        parts.append(piece if op == "=" else (f"[-{piece}-]" if op == "-" else f"{{+{piece}+}}"))
    return "".join(parts)


def _finished(store) -> bool:
    """Did the run in ``store`` finish its search: a gap state for each gap it was asked to fill, every one done?"""
    from benchfill.schema import GapState

    states = store.all(GapState)
    asked = (store.get_meta("options") or {}).get("gaps")
    return bool(states) and all(st.status == "done" for st in states) and (
        not isinstance(asked, int) or len(states) >= asked)


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
