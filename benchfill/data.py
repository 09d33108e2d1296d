"""Reading a benchmark from disk: items (JSONL) and responses (long CSV or JSONL).

Every problem a user can cause ends in one ``DataError`` whose message names the
file and, where there is one, the line. Responses are aggregated: repeated rows
for the same (model, item) pair add up, as the long format allows.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchfill.errors import ConfigError, DataError
from benchfill.matrix import MAX_COUNT, ResponseMatrix

RESPONSE_FIELDS = ("model", "item_id", "correct", "trials")
CHOICE_FIELDS = ("options", "choices")


def read_items(path: str | Path, *, required: Sequence[str] = (), spec_name: str = "", text_field: str | None = None,
               id_field: str | None = None, clean: Callable[[dict[str, Any]], Any] | None = None
               ) -> list[dict[str, Any]]:
    """Items from a JSONL file: one object per line with a unique ``id`` (kept as a string; read from the
    spec's ``id_field`` in a file whose rows have no ``id``) and every field named in ``required`` (the
    benchmark spec's text, answer and grader fields), none of them null, and ``text_field`` a text.
    ``clean``: applied to each object before it is checked (a release's columns taken off its rows)."""
    path = Path(path)
    if isinstance(required, str):  # one field's name, not its letters ("item lacks field 'p'")
        required = (required,)
    items: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    for lineno, obj in jsonl_objects(path):
        if clean is not None:
            clean(obj)
        # a row with an id keeps it: a release's rows carry the release's ids (a child's id_field holds its
        # own id too, benchfill.prompts.new_child)
        id_name = "id" if "id" in obj or not id_field else id_field
        item_id = obj.get(id_name)
        if isinstance(item_id, bool) or not isinstance(item_id, (str, int)) or str(item_id) == "":
            raise DataError(f"{path}:{lineno}: missing or invalid field {id_name!r}")
        # stripped, as the responses readers strip the names they read: "demo-001\t" here and "demo-001"
        # there are one item (unstripped, a responses file could never name it)
        item_id = str(item_id).strip()
        if not item_id:
            raise DataError(f"{path}:{lineno}: missing or invalid field {id_name!r}")
        if item_id in first_line:
            raise DataError(f"{path}:{lineno}: duplicate item id {item_id!r} (first on line {first_line[item_id]})")
        first_line[item_id] = lineno
        check_item_fields(obj, item_id, required, text_field, f"{path}:{lineno}", spec_name)
        obj["id"] = item_id
        items.append(obj)
    if not items:
        raise DataError(f"{path}: empty items file")
    return items


def check_item_fields(obj: dict[str, Any], item_id: str, required: Sequence[str], text_field: str | None,
                      where: str, spec_name: str = "") -> None:
    """Every field of ``required`` present and not null, and ``text_field`` a text: a null answer would be
    graded as the string "None", and a question that is a JSON object shown to the probes as one."""
    spec = f" (spec {spec_name})" if spec_name else ""
    for f in required:
        if f not in obj:
            raise DataError(f"{where}: item {item_id} lacks field {f!r}{spec}")
        if obj[f] is None:
            raise DataError(f"{where}: item {item_id}: field {f!r} is null{spec}")
    if text_field is not None and text_field in obj and not isinstance(obj[text_field], str):
        raise DataError(f"{where}: item {item_id}: field {text_field!r} is not text "
                        f"(a JSON {type(obj[text_field]).__name__}){spec}")


def guessing_floor(item: dict[str, Any], options_field: str | None = None) -> float:
    """The IRT guessing floor g of one item, the chance of a right answer by guessing: 1 / (number
    of options) for multiple choice (the list in ``options_field``, else in "options" or "choices"),
    0 for free response. The one definition: data files, benchmark specs and the simulated world."""
    fields = (options_field,) if options_field else CHOICE_FIELDS
    opts = next((_options(item[f]) for f in fields if _options(item.get(f)) is not None), None)
    return 1.0 / len(opts) if opts else 0.0


def options_of(value: Any) -> list | None:
    """The options of a multiple-choice field (``_options``): a list, the texts of the Hugging Face layout, or None."""
    return _options(value)


def _options(value: Any) -> list | None:
    """The options of a multiple-choice field: a list, or the Hugging Face layout {"text": [...], "label": [...]}
    (ARC, CommonsenseQA); None for anything else."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in ("text", "label"):
            if isinstance(value.get(key), list):
                return value[key]
    return None


def item_chance(items: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Guessing floor per item id (``guessing_floor``)."""
    return {item["id"]: guessing_floor(item) for item in items}


def read_responses(
    path: str | Path,
    *,
    items: Sequence[dict[str, Any]] | str | Path | None = None,
    min_models: int = 2,
    items_source: str | Path | None = None,
) -> ResponseMatrix:
    """A response matrix from a long-format file (``model,item_id,correct,trials``).

    CSV (with a header) or JSONL, chosen by the file suffix. With ``items`` (a list
    from :func:`read_items`, or its path) every response must name a known item;
    items are ordered as in the item file and get their guessing floor from an
    ``options``/``choices`` list. Items without any response are left out, and so are items
    whose rows all have trials 0: with no attempt there is no difficulty to measure, and a fit
    would place them by its prior alone. The ids of the latter are kept in ``matrix.untried`` for the
    caller to report (the library prints nothing); ``extreme_items(matrix, items)`` lists both kinds. ``items_source``: the file a list of ``items`` was read from,
    named in errors about an item.
    """
    if not isinstance(path, (str, os.PathLike)):  # pathlib's TypeError named no argument
        raise ConfigError(f"path: a file path (str or Path), got {type(path).__name__} {path!r:.80}")
    if isinstance(min_models, bool) or not isinstance(min_models, int) or min_models < 1:
        raise ConfigError(f"min_models: a whole number of at least 1, got {min_models!r}")
    path = Path(path)
    if isinstance(items, (str, Path)):
        items_source, items = items, read_items(items)
    elif items is not None:  # a caller's own list: each item a mapping with its id (a bare KeyError otherwise)
        items = list(items)  # (a generator is read once: checked here, then used)
        bad = next((k for k, it in enumerate(items) if not isinstance(it, dict) or "id" not in it), None)
        if bad is not None:
            raise DataError(f"items[{bad}]: expected an item with an 'id' (as benchfill.read_items gives), got "
                            f"{items[bad]!r:.80}")
    known = None if items is None else {it["id"] for it in items}
    # The rows are read a column at a time (a list each), a chunk of them at once, and their values checked after:
    # a row at a time, two million rows took 6.9 s, a column at a time 2.9 s (bench/bench_read.py; the CSV
    # module's reading is most of what is left). Each chunk's names are made indices before the next is read: all the rows' strings at
    # once took 517 MB.
    model_index: dict[str, int] = {}  # first appearance orders the models and the items
    item_index: dict[str, int] = {}
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    text = path.suffix.lower() not in (".jsonl", ".json")  # a CSV's counts are all text, as written

    def take(lines: list[int], names: list[str], ids: list[str], cs: list[Any], ts: list[Any]) -> None:
        c, t = _counts(path, lines, names, ids, cs, ts, known, text)
        for index, keys in ((model_index, names), (item_index, ids)):
            for k in dict.fromkeys(keys):
                index.setdefault(k, len(index))
        # 32 bits a value (counts are at most MAX_COUNT, 10**9): the rows' columns are the reading's memory
        parts.append((np.fromiter(map(model_index.__getitem__, names), dtype=np.int32, count=len(names)),
                      np.fromiter(map(item_index.__getitem__, ids), dtype=np.int32, count=len(ids)),
                      c.astype(np.int32), t.astype(np.int32)))

    (_csv_columns if text else _jsonl_columns)(path, _Columns(take))
    mi, ii, cs, ts = (np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, dtype=np.int32)
                      for k in range(4))
    parts.clear()
    if not len(mi):
        raise DataError(f"{path}: no responses (empty file)")
    if not ts.any():
        raise DataError(f"{path}: no responses: every row has trials 0")
    correct_m = np.zeros((len(model_index), len(item_index)), dtype=np.int64)
    trials_m = np.zeros_like(correct_m)
    np.add.at(correct_m, (mi, ii), cs)
    np.add.at(trials_m, (mi, ii), ts)
    # One row a sample is a long format too, and adds up; a file written twice over adds up the same way, and
    # doubles every count unseen: the rows that repeat a pair are counted, for the reader to say so.
    seen = np.zeros(correct_m.shape, dtype=bool)
    seen[mi, ii] = True
    repeated = len(mi) - int(np.count_nonzero(seen))
    del seen
    # A model that attempted nothing has no ability: kept, it would count towards the models IRT needs
    # and sit at its prior in every figure made from the abilities.
    attempted = trials_m.sum(axis=1) > 0  # some row has trials (checked above), so some model stays
    models = tuple(m for m, a in zip(model_index, attempted, strict=True) if a)
    idle = tuple(m for m, a in zip(model_index, attempted, strict=True) if not a)
    correct_m, trials_m = correct_m[attempted], trials_m[attempted]
    if len(models) < min_models:  # IRT needs two; a before/after test (benchfill detect) needs one
        also = f" ({len(idle)} more with trials 0 only: {', '.join(idle[:3])}{', ...' if len(idle) > 3 else ''})"
        raise DataError(f"{path}: responses from {len(models)} model{also if idle else ''}; IRT needs at least "
                        "two models")

    item_ids = tuple(item_index)
    chance = np.zeros(len(item_ids))
    if items is not None:
        # The item file's order is the benchmark's order; keep it.
        order = [it["id"] for it in items if it["id"] in item_index]
        cols = np.array([item_index[i] for i in order])
        correct_m, trials_m, item_ids = correct_m[:, cols], trials_m[:, cols], tuple(order)
        floor = item_chance(items)
        chance = np.array([floor[i] for i in item_ids])
        single = [i for i in item_ids if floor[i] >= 1.0]
        if single:
            raise DataError(f"{_item_line(items_source, single[0])}item {single[0]!r}: one answer option gives a "
                            "guessing floor of 1 (every answer right, nothing to learn about its difficulty); give it "
                            "two options or more, or none")
    tried = trials_m.sum(axis=0) > 0  # some item has trials (checked above), so some column stays
    untried = tuple(i for i, t in zip(item_ids, tried, strict=True) if not t)
    if untried:
        correct_m, trials_m, chance = correct_m[:, tried], trials_m[:, tried], chance[tried]
        item_ids = tuple(i for i, t in zip(item_ids, tried, strict=True) if t)
    return ResponseMatrix(models, item_ids, correct_m, trials_m, chance, str(path), untried, idle, repeated)


def extreme_items(matrix: ResponseMatrix, items: Sequence[dict[str, Any]] | None = None) -> dict[str, list[str]]:
    """Items every model always solved, items no model ever solved, and items with no responses at
    all: those of the item file (when given) that the responses never name, and those they name only
    with trials 0 (``matrix.untried``).

    The first two carry no information about relative difficulty beyond "below/above every
    model", so IRT pushes them to the ends of the axis; the last are not on the scale at all.
    A user must see all three.
    """
    tried = matrix.trials.sum(axis=0)
    right = matrix.correct.sum(axis=0)
    ids = np.asarray(matrix.item_ids, dtype=object)
    answered = set(matrix.item_ids)
    missing = [it["id"] for it in items or () if it["id"] not in answered]
    return {**_all_or_none(ids, right, tried),
            "no_responses": missing + [i for i in matrix.untried if i not in set(missing)]}


def extreme_models(matrix: ResponseMatrix) -> dict[str, list[str]]:
    """Models that solved every item they tried, and models that solved none.

    Such a model's answers say only "above (below) every item": only the prior holds its fitted ability
    finite, and it places no item between others. A user must see them, as the items.
    """
    ids = np.asarray(matrix.models, dtype=object)
    return _all_or_none(ids, matrix.correct.sum(axis=1), matrix.trials.sum(axis=1))


def _all_or_none(ids: np.ndarray, right: np.ndarray, tried: np.ndarray) -> dict[str, list[str]]:
    """The names (of items or models) whose tried answers were all right, and those whose were all wrong."""
    return {"all_correct": ids[(tried > 0) & (right == tried)].tolist(),
            "none_correct": ids[(tried > 0) & (right == 0)].tolist()}


def _item_line(source: str | Path | None, item_id: str) -> str:
    """``path:line: `` of item ``item_id`` in the JSONL file ``source``, as an error's prefix; ``''`` when it
    is not known (items from the Hub, or built in). Looked up only for an error, so the reading stays lean."""
    if source is None or not Path(source).is_file():
        return ""
    try:
        line = next((n for n, obj in jsonl_objects(source) if str(obj.get("id")) == item_id), None)
    except DataError:
        line = None
    return f"{source}:{line}: " if line else f"{source}: "


def read_reference_scores(path: str | Path) -> dict[str, float]:
    """Model scores from JSON ``{model: score}`` or CSV/TSV lines ``model,score`` (a header line allowed).

    A model named twice, a score that is a JSON boolean and a line with more than two columns are refused
    with the file and line: each would otherwise be read as something nobody wrote (the last score
    winning, true as 1.0, 'm0,0.1' as a model's name)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: reference ranking file not found")
    text = read_text(path)
    scores: dict[str, float] = {}
    if path.suffix.lower() == ".json":
        def lines_of(key: str) -> list[int]:  # json keeps no positions: found again in the text, for the message
            found = re.finditer(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:", text)
            return [text.count("\n", 0, m.start()) + 1 for m in found]

        def at(key: str, k: int = 0) -> str:
            lines = lines_of(key)
            return f"{path}:{lines[k]}" if len(lines) > k else str(path)

        def pairs(kv: list[tuple[str, Any]]) -> dict[str, Any]:
            seen: dict[str, Any] = {}
            for k, v in kv:
                if k in seen:
                    lines = lines_of(k)
                    first = f"first on line {lines[0]}" if len(lines) > 1 else "named twice"
                    raise DataError(f"{at(k, 1)}: model {k!r} again ({first})")
                seen[k] = v
            return seen

        try:
            obj = loads_json(text, object_pairs_hook=pairs)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}: expected a JSON object {{model: score}}, found {type(obj).__name__}")
        for m, v in obj.items():
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise DataError(f"{at(m)}: model {m!r}: score {json.dumps(v)} is not a number")
            try:
                scores[m] = float(v)
            except ValueError:
                raise DataError(f"{at(m)}: model {m!r}: score {v!r} is not a number") from None
        return scores
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.replace("\t", ",").split(",")]
        try:
            score = float(parts[1]) if len(parts) == 2 else None
        except ValueError:
            score = None
        if score is None:
            if lineno == 1 and len(parts) <= 2:  # a header line
                continue
            raise DataError(f"{path}:{lineno}: expected 'model,score', found {len(parts)} column(s)"
                            if len(parts) != 2 else f"{path}:{lineno}: score {parts[1]!r} is not a number")
        if parts[0] in first_line:
            raise DataError(f"{path}:{lineno}: model {parts[0]!r} again (first on line {first_line[parts[0]]})")
        first_line[parts[0]] = lineno
        scores[parts[0]] = score
    return scores


def json_kind(v: Any) -> str:
    """A value's type in JSON's words (a Python dict is a JSON object)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(v), type(v).__name__)


def untried_note(matrix: ResponseMatrix) -> str | None:
    """One line naming the items and the models ``read_responses`` left out for having trials 0 only, or None."""
    def listed(names: tuple[str, ...]) -> str:
        return ", ".join(names[:10]) + (f" ... (+{len(names) - 10})" if len(names) > 10 else "")

    ids, models = matrix.untried, matrix.untried_models
    parts = ([f"{len(ids)} item(s) with trials 0 only have no difficulty and are left out: {listed(ids)}"] if ids
             else []) + ([f"{len(models)} model(s) with trials 0 only have no ability and are left out: "
                          f"{listed(models)}"] if models else [])
    return f"{matrix.source}: {'; '.join(parts)}" if parts else None


def repeated_note(matrix: ResponseMatrix) -> str | None:
    """One line saying how many rows of the source repeated a (model, item) pair and were added to it, or None."""
    if not matrix.repeated:
        return None
    return (f"{matrix.source}: {matrix.repeated} row(s) name a (model, item) pair an earlier row names; their "
            "counts are added to it (a row a sample is read so; a file written twice over doubles every count)")


def _same_to_a_reader(item_id: str, known: set[str]) -> str:
    """", which has X" where the items file holds the same id in another Unicode normal form (NFC against NFD:
    the two look alike and compare unequal), else ""."""
    import unicodedata

    if item_id.isascii():
        return ""
    nfc = unicodedata.normalize("NFC", item_id)
    same = sorted(k for k in known if not k.isascii() and unicodedata.normalize("NFC", k) == nfc)
    return f", which has {ascii(same[0])}: the same letters in another Unicode normal form" if same else ""


# -- parsing helpers ---------------------------------------------------------------------------


def _open_text(path: Path, newline: str | None = None):
    """``path`` opened as UTF-8 text, or a one-line ``DataError`` saying why it cannot be."""
    try:  # utf-8-sig: a byte-order mark (as Excel writes at the start of a CSV) is not part of the header
        return open(path, encoding="utf-8-sig", newline=newline)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None


def loads_json(text: str, **kw: Any) -> Any:
    """``json.loads``, with a value nested too deeply for Python's parser raised as the ``JSONDecodeError`` every
    reader already turns into its one-line error (a RecursionError escaped them all as a traceback)."""
    try:
        return json.loads(text, **kw)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None


_PACKED = ((b"\x1f\x8b", "gzip-compressed", "gunzip it"), (b"PK\x03\x04", "a zip archive", "unzip it"),
           (b"BZh", "bzip2-compressed", "bunzip2 it"), (b"\xfd7zXZ\x00", "xz-compressed", "unxz it"),
           (b"(\xb5/\xfd", "zstd-compressed", "unzstd it"), (b"\x04\x22\x4d\x18", "lz4-compressed", "unlz4 it"))


def not_text(path: Path) -> str:
    """Why ``path`` is no UTF-8 text, for its one-line error."""
    return _packed(path) or f"{path}: not a UTF-8 text file"


def _packed(path: Path) -> str | None:
    """What a compressed file is, said as such (its bytes read as text had said only "not UTF-8"), or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None
    for magic, what, how in _PACKED:
        if head.startswith(magic):
            return f"{path}: {what}; benchfill reads the plain file: {how} first"
    return None


def read_text(path: str | Path) -> str:
    """A whole UTF-8 text file (a byte-order mark dropped), or a one-line ``DataError`` naming it."""
    path = Path(path)
    with _open_text(path) as fh:
        try:
            return fh.read()
        except UnicodeDecodeError:
            raise DataError(not_text(path)) from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Each non-blank line, decoded on its own, so that bytes that are not UTF-8 are named by line and byte
    (a whole-file decode could only say the file was not UTF-8). A byte-order mark at a line's start (a
    file made by joining files an editor saved) is dropped."""
    try:  # text mode splits lines on \n, \r\n and \r alike; bytes that are not UTF-8 kept as surrogates
        fh = open(path, encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    with fh:
        for lineno, line in enumerate(fh, start=1):
            bom = 3 if line.startswith("\ufeff") else 0  # its bytes count in the line as stored
            line = line[1:] if bom else line
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as exc:
                at = bom + len(line[:exc.start].encode("utf-8", "surrogateescape"))
                bad = line[exc.start].encode("utf-8", "surrogateescape")
                if lineno == 1 and (packed := _packed(path)):
                    raise DataError(packed) from None
                raise DataError(f"{path}:{lineno}: not UTF-8 text (byte {at + 1} of the line: {bad!r})") from None
            if line.strip():
                yield lineno, line


def _no_surrogates(obj: Any, path: Path, lineno: int, where: str = "") -> None:
    """A JSON ``"\\ud800"`` escape with no pair decodes to a string no file, store or page can hold: said
    here, naming the field, rather than as a traceback where the text is first written."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DataError(f"{path}:{lineno}: field {where or '(top level)'!r} holds an unpaired surrogate "
                            f"({obj[exc.start]!a}), not text") from None
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _no_surrogates(k, path, lineno, where)
            _no_surrogates(v, path, lineno, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _no_surrogates(v, path, lineno, f"{where}[{i}]")


def jsonl_objects(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSONL file; one-line errors otherwise."""
    path = Path(path)
    for lineno, line in _lines(path):
        try:
            obj = loads_json(line)
        except json.JSONDecodeError as exc:
            what = exc.msg.removesuffix(" at")  # "Invalid control character at": json's message reads on
            # a CSV or TSV given where JSONL is read: said, not only "Expecting value, column 1"
            hint = "; this file is read as JSONL (one JSON object a line), not CSV" \
                if lineno == 1 and path.suffix.lower() in (".csv", ".tsv", ".txt") else ""
            raise DataError(f"{path}:{lineno}: malformed JSON ({what}, column {exc.colno}){hint}") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        if "\\u" in line:  # only an escape can make a lone surrogate
            _no_surrogates(obj, path, lineno)
        yield lineno, obj


class _Columns:
    """The rows read and not yet taken, a list a column (line, model, item, correct, trials), handed to ``take``
    every CHUNK rows and at the end. A reader that meets a malformed record hands over the rows before it first
    (``flush``), so that a bad value on an earlier line is the error said."""

    CHUNK = 100_000

    def __init__(self, take: Callable[..., None]):
        self.take = take
        self.lists = ([], [], [], [], [])

    def flush(self) -> tuple[list, ...]:
        """Hand the rows over; the new lists to append to."""
        if self.lists[0]:
            self.take(*self.lists)
        self.lists = ([], [], [], [], [])
        return self.lists


def _jsonl_columns(path: Path, cols: _Columns) -> None:
    """Each response's line, model, item, correct and trials, appended to ``cols`` as read."""
    lines, names, ids, cs, ts = cols.lists
    failed = None
    try:
        for lineno, obj in jsonl_objects(path):
            missing = [f for f in RESPONSE_FIELDS if f not in obj]
            if missing:
                raise DataError(f"{path}:{lineno}: missing field {missing[0]!r}")
            model, item_id = _name(obj["model"], "model", path, lineno), _name(obj["item_id"], "item_id", path, lineno)
            lines.append(lineno)
            names.append(model)
            ids.append(item_id)
            cs.append(obj["correct"])
            ts.append(obj["trials"])
            if len(lines) >= cols.CHUNK:
                lines, names, ids, cs, ts = cols.flush()
    except DataError as exc:
        failed = exc
    cols.flush()  # (outside the handler: an earlier line's error is not shown as raised while handling it)
    if failed is not None:
        raise failed


def _name(value: Any, field: str, path: Path, lineno: int) -> str:
    """A model or item name from JSON: a string, or an integer id (3 -> '3'); null, 1.5 or a list is refused,
    since str() would make 'None' or '1.5' a name nobody wrote."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise DataError(f"{path}:{lineno}: field {field!r} must be a string or an integer, got {json.dumps(value)}")


_CSV_FIELD_MAX = 2**31 - 1  # (a C long everywhere)


def long_csv_fields() -> None:
    """Let the csv module read a field of any length. Its default limit, 131,072 characters, refused a review
    sheet holding a long code solution as "malformed CSV", so a sheet benchfill exported could not be imported
    back. The limit is the csv module's own and process-wide; benchfill only ever raises it."""
    if csv.field_size_limit() < _CSV_FIELD_MAX:
        csv.field_size_limit(_CSV_FIELD_MAX)


def _csv_columns(path: Path, cols: _Columns) -> None:
    """Each response's line, model, item, correct and trials, appended to ``cols`` as read (the counts as
    written). Records, not lines: a quoted field may hold a line break. Errors name the line a record starts on."""
    long_csv_fields()
    with _open_text(path, newline="") as fh:
        reader = csv.reader(fh)
        records = _csv_records(reader, path)
        first = next(records, None)
        if first is None:
            raise DataError(f"{path}: no responses (empty file)")
        header_line, header = first
        header = [h.strip() for h in header]
        check_header(header, f"{path}:{header_line}")
        missing = [f for f in RESPONSE_FIELDS if f not in header]
        if missing:
            raise DataError(f"{path}:{header_line}: header lacks column {missing[0]!r} (need {','.join(RESPONSE_FIELDS)})")
        pm, pi, pc, pt = (header.index(f) for f in RESPONSE_FIELDS)
        width = len(header)
        # _csv_records's loop, written out: a generator's step per row was a third of the reading's time
        start = reader.line_num + 1
        lines, names, ids, cs, ts = cols.lists
        failed = None
        try:
            while failed is None:
                read = 0
                for fields in itertools.islice(reader, cols.CHUNK):  # (a chunk of records: no count per row)
                    read += 1
                    lineno, start = start, reader.line_num + 1
                    if not fields or not (fields[0].strip() or any(f.strip() for f in fields)):
                        continue  # a blank record
                    if len(fields) != width:
                        hint = " (an unclosed quote?)" if any("\n" in f for f in fields) else ""
                        failed = DataError(f"{path}:{lineno}: malformed line: {len(fields)} fields, header has "
                                           f"{width}{hint}")
                        break
                    lines.append(lineno)
                    names.append(fields[pm].strip())
                    ids.append(fields[pi].strip())
                    cs.append(fields[pc])
                    ts.append(fields[pt])
                if failed is not None or read < cols.CHUNK:
                    break
                lines, names, ids, cs, ts = cols.flush()
        except csv.Error as exc:
            failed = DataError(f"{path}:{start}: malformed CSV ({exc})")
        except UnicodeDecodeError:
            failed = DataError(not_text(path))
    cols.flush()  # (outside the handler: an earlier line's error is not shown as raised while handling it)
    if failed is not None:
        raise failed


def check_header(header: Sequence[str], where: str) -> None:
    """Refuse a CSV header that only a comma-separated reading gets wrong, or that names a column twice.

    A tab- or ';'-separated file read as CSV has a header of one field holding all the names: said so, where
    the first complaint had been a missing column. A column named twice was read from one copy (csv.reader's
    index: the first; DictReader: the last) with no word, the other's data lost; empty names (the trailing
    commas a spreadsheet leaves) are no column and may repeat."""
    if len(header) == 1:
        sep = next((name for sep, name in (("\t", "tabs"), (";", "';'")) if sep in header[0]), None)
        if sep is not None:
            raise DataError(f"{where}: the header is separated by {sep}, not commas; save the file as "
                            "comma-separated CSV")
    seen: set[str] = set()
    for name in header:
        if name in seen and name.strip():
            raise DataError(f"{where}: the header names column {name!r} twice")
        seen.add(name)


def _csv_records(reader: Any, path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line the record starts on, fields)`` for each record that is not blank."""
    start = 1
    try:
        for fields in reader:
            lineno, start = start, reader.line_num + 1
            if any(f.strip() for f in fields):
                yield lineno, fields
    except csv.Error as exc:
        raise DataError(f"{path}:{start}: malformed CSV ({exc})") from None
    except UnicodeDecodeError:
        raise DataError(not_text(path)) from None




def _counts(path: Path, lines: list[int], names: list[str], ids: list[str], cs: list[Any], ts: list[Any],
            known: set[str] | None, text: bool) -> tuple[np.ndarray, np.ndarray]:
    """The counts of every row as arrays, each row checked as :func:`_checked_counts` checks it.

    Most files are whole numbers throughout: those are read and checked a column at a time. Anything else (a count written 3.0, a bad row) is read a row at a time, so the
    error, where there is one, names the first line at fault, as before. ``text``: the counts are a CSV's cells
    (JSON's are read by int() only where each is an int: "1" first had made 2.9 read as 2, and true as 1)."""
    n = len(lines)
    try:
        if text:  # a CSV's cells: int() reads the text
            # int() also reads "1_0" as 10 and other scripts' digits: such a chunk is read a row at a time
            plain = "".join(cs) + "".join(ts)
            if "_" in plain or not plain.isascii():
                raise ValueError
            c = np.fromiter(map(int, cs), dtype=np.int64, count=n)  # (spaces around it too)
            t = np.fromiter(map(int, ts), dtype=np.int64, count=n)
        elif all(type(v) is int for v in cs) and all(type(v) is int for v in ts):  # JSON (a bool is no count)
            c, t = np.array(cs, dtype=np.int64), np.array(ts, dtype=np.int64)
        else:
            c = t = None
    except (ValueError, TypeError, OverflowError):
        c = t = None
    if c is None or t is None:  # (outside the handler: the error said is not one raised while handling it)
        return _checked_counts(path, lines, names, ids, cs, ts, known, text)
    if ("" in names or "" in ids or (known is not None and not known.issuperset(ids))
            or c.min(initial=0) < 0 or t.min(initial=0) < 0 or t.max(initial=0) > MAX_COUNT or (c > t).any()):
        return _checked_counts(path, lines, names, ids, cs, ts, known, text)
    return c, t


def _checked_counts(path: Path, lines: list[int], names: list[str], ids: list[str], cs: list[Any], ts: list[Any],
                    known: set[str] | None, text: bool) -> tuple[np.ndarray, np.ndarray]:
    """The counts of every row, read a row at a time; a one-line error naming the first line at fault.
    ``text``: a CSV's cells (JSON's strings are read as written, as before)."""
    c = np.empty(len(lines), dtype=np.int64)
    t = np.empty(len(lines), dtype=np.int64)
    for k, lineno in enumerate(lines):
        if names[k] == "":
            raise DataError(f"{path}:{lineno}: empty field 'model'")
        item_id = ids[k]
        if item_id == "":
            raise DataError(f"{path}:{lineno}: empty field 'item_id'")
        if known is not None and item_id not in known:
            raise DataError(f"{path}:{lineno}: item {item_id!r} is not in the items file{_same_to_a_reader(item_id, known)}")
        # a CSV's cells stripped first, as its names are: int() keeps a separator such as \x1f that strip() drops
        c[k] = _count(cs[k].strip() if text else cs[k], "correct", path, lineno)
        t[k] = _count(ts[k].strip() if text else ts[k], "trials", path, lineno)
        if c[k] > t[k]:
            raise DataError(f"{path}:{lineno}: correct ({c[k]}) > trials ({t[k]})")
    return c, t


def _count(value: Any, name: str, path: Path, lineno: int) -> int:
    """A non-negative integer count; '3', 3 and 3.0 are fine, '1.5', -1, 'x' and '1_0' are not."""
    given = value
    if isinstance(value, bool):
        value = None
    elif isinstance(value, str) and ("_" in value or not value.strip().isascii()):  # (spaces around it: any)
        value = None  # int() reads "1_0" as 10, and other scripts' digits
    elif isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            try:
                f = float(value)
                value = int(f) if f.is_integer() else None
            except ValueError:
                value = None
    elif isinstance(value, float):
        value = int(value) if value.is_integer() else None
    if not isinstance(value, int):
        said = json.dumps(given, ensure_ascii=True)[:40] if not isinstance(given, str) else ascii(given)[:40]
        raise DataError(f"{path}:{lineno}: field {name!r} must be a non-negative integer, got {said} (a count of "
                        "answers: partial credit is not read; leave out the row of a pair never tried)")
    if value < 0:
        raise DataError(f"{path}:{lineno}: field {name!r} is negative ({value})")
    if value > MAX_COUNT:
        raise DataError(f"{path}:{lineno}: field {name!r} is implausibly large ({value}; at most {MAX_COUNT})")
    return value


def _yaml_unique_keys(text: str):
    """The YAML document's data, refusing a key given twice in one mapping: YAML keeps the last silently,
    where TOML refuses it, so a second ``model:`` under a probe would replace the first without a word. The
    keys are checked as written, on the composed nodes (before a merge "<<" brings keys one may override)."""
    import yaml

    loader = yaml.SafeLoader(text)  # composed once: checked, then constructed from the same nodes
    try:
        root = loader.get_single_node()
        _check_unique_keys(root)
        return loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()


def _check_unique_keys(root) -> None:
    """Raise at the second of a key given twice in one mapping of the composed document (merges left out)."""
    import yaml
    from yaml.constructor import ConstructorError

    seen_nodes: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # an alias: checked where it was anchored
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key_node, value_node in node.value:
                stack += [key_node, value_node]
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (key_node.tag, key_node.value)
                if key in first:
                    raise ConstructorError(None, None, f"key {key_node.value!r} given twice (first on line "
                                           f"{first[key]})", key_node.start_mark)
                first[key] = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def read_mapping(path: Path) -> dict[str, Any]:
    """A TOML (.toml) or YAML (.yaml/.yml) file that holds a mapping: a config or a benchmark spec."""
    if path.is_dir():
        raise ConfigError(f"{path}: a folder, not a config file")
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    text = read_text(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = _yaml_unique_keys(text) or {}
        else:
            raise ConfigError(f"{path}: unknown config format {suffix!r} (use .toml, .yaml or .yml)")
    except ConfigError:
        raise
    except Exception as exc:  # tomllib.TOMLDecodeError / yaml.YAMLError carry the line
        msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        if getattr(exc, "problem", None):  # YAML: the first line is the context ("while scanning ..."); this is why
            msg = " ".join(str(exc.problem).split())
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: cannot parse config: {msg}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping at the top level")
    return data
