"""The prediction target: IRT difficulty standardized within each benchmark, z(beta).

Difficulties differ in location and spread from one benchmark to the next, so a predictor trained on
raw beta learns which benchmark an item comes from rather than how hard it is inside it (the paper's
section 4.2: a benchmark-average predictor gets a high rank correlation and zero within-benchmark
pairwise accuracy). Standardizing within each benchmark removes that confound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchfill.data import json_kind
from benchfill.errors import ConfigError, DataError

# Fields tried, in order, when an item's spec is not known (a new item handed to a trained predictor).
TEXT_FIELDS = ("problem", "question", "prompt", "text", "input")
OPTION_FIELDS = ("options", "choices")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def item_text(item: dict[str, Any], text_field: str | None = None, options_field: str | None = None) -> str:
    """What a solver sees of an item: its text, then its options as lettered lines ``A. ...``."""
    fields = tuple(dict.fromkeys((text_field, *TEXT_FIELDS))) if text_field else TEXT_FIELDS
    text = next((item[f] for f in fields if isinstance(item.get(f), str)), None)
    if text is None:
        raise DataError(f"item {item.get('id', '?')}: no text field (looked for {', '.join(fields)})")
    ofields = (options_field, *OPTION_FIELDS) if options_field else OPTION_FIELDS
    options = next((item[f] for f in ofields if isinstance(item.get(f), list)), None)
    if options:
        text += "\n" + "\n".join(f"{LETTERS[k % 26]}. {o}" for k, o in enumerate(options))
    return text


class ItemFieldError(DataError):
    """An item whose field cannot be read; ``index`` is its place among the items handed in, so that a
    caller who read them from a file can name its line."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class FieldFallbackWarning(UserWarning):
    """Items scored from another field than the one the predictor was trained on (the message names both)."""


@dataclass(frozen=True)
class TextFields:
    """The fields a set of items is read through: one text field for all of them, and the options field."""

    text_field: str
    options_field: str | None = None
    notes: tuple[str, ...] = ()  # one line per fallback to another field than the predictor's


def resolve_text_fields(items: Sequence[dict[str, Any]], text_field: str | None = None,
                        options_field: str | None = None) -> TextFields:
    """Choose one text field for all ``items``: ``text_field`` (the predictor's) when every item has it.

    Items without it fall back to the one field of ``TEXT_FIELDS`` they all have, with a note; a choice
    that is not clear-cut is refused (``DataError``): some items have ``text_field`` and others do not,
    the items hold several candidate fields, or no one field is common to all of them. So is an item whose
    ``text_field`` holds something else than text (``ItemFieldError``, naming the item's place). The
    options follow the same rule (``_options_field``).
    """
    # a library caller's None, one dict or a list holding None had failed below as an AttributeError; a
    # datasets.Dataset (a released split) is no registered Sequence, but is read like one
    if isinstance(items, (dict, str, bytes)) or not (hasattr(items, "__len__") and hasattr(items, "__getitem__")):
        raise DataError(f"items: expected a list of items (dicts of their fields), got {type(items).__name__}")
    wrong = next((k for k, it in enumerate(items) if not isinstance(it, dict)), None)
    if wrong is not None:
        raise ItemFieldError(f"items[{wrong}]: expected an item (a dict of its fields), got "
                             f"{type(items[wrong]).__name__}", wrong)

    def has(it: dict[str, Any], f: str) -> bool:
        return isinstance(it.get(f), str)

    def iid(it: dict[str, Any]) -> str:
        return str(it.get("id", "?"))

    notes: list[str] = []
    if text_field:  # the predictor's field holding something else than text would be skipped without a word
        wrong = next((k for k, it in enumerate(items) if it.get(text_field) is not None and not has(it, text_field)),
                     None)
        if wrong is not None:
            raise ItemFieldError(f"item {iid(items[wrong])}: field {text_field!r} is a JSON "
                                 f"{json_kind(items[wrong][text_field])}, not text", wrong)
    if text_field and all(has(it, text_field) for it in items):
        chosen = text_field
    else:
        if text_field:
            lacking = [k for k, it in enumerate(items) if not has(it, text_field)]
            if len(lacking) < len(items):
                raise ItemFieldError(f"item {iid(items[lacking[0]])} has no text field {text_field!r} (the predictor's) "
                                     f"while {len(items) - len(lacking)} of {len(items)} items have it; give every "
                                     "item that field", lacking[0])
        common = [f for f in TEXT_FIELDS if all(has(it, f) for it in items)]
        if not common:
            looked = tuple(dict.fromkeys((text_field, *TEXT_FIELDS))) if text_field else TEXT_FIELDS
            bare = next((k for k, it in enumerate(items) if not any(has(it, f) for f in looked)), None)
            if bare is not None:
                raise ItemFieldError(f"item {iid(items[bare])}: no text field (looked for {', '.join(looked)})", bare)
            first = {f: next(it for it in items if has(it, f)) for f in TEXT_FIELDS if any(has(it, f) for it in items)}
            raise DataError("items differ in their text field (" + ", ".join(
                f"item {iid(it)}: {f!r}" for f, it in first.items()) + "); give every item the same one")
        if text_field and len(common) > 1:
            raise DataError(f"no text field {text_field!r} (the predictor's), and several candidates "
                            f"({', '.join(repr(f) for f in common)}); rename the one to score to {text_field!r}")
        chosen = common[0]
        if text_field:
            notes.append(f"no text field {text_field!r} (the predictor's); scoring the items' {chosen!r} "
                         f"instead (rename it to {text_field!r} to make the choice explicit)")
    options = _options_field(items, options_field)
    if options_field and options and options != options_field:
        notes.append(f"no options field {options_field!r} (the predictor's); reading the items' {options!r} as "
                     f"their options instead (rename it to {options_field!r} to make the choice explicit)")
    return TextFields(chosen, options, tuple(notes))


def _options_field(items: Sequence[dict[str, Any]], options_field: str | None) -> str | None:
    """The one field all ``items`` read their options from, or None where none has options.

    The text field's rule holds for the options too: every item through one field, and a field that holds
    something else than a list of option texts is refused, as is a file where some items have options and
    others none (read as items without options, they would be scored as another kind of item).
    """
    looked = tuple(dict.fromkeys((options_field, *OPTION_FIELDS))) if options_field else OPTION_FIELDS
    where: list[str | None] = []
    for k, it in enumerate(items):
        f = next((f for f in looked if it.get(f) is not None), None)  # null: no options, as a missing field
        where.append(f)
        if f is None:
            continue
        v = it[f]
        if not isinstance(v, list):
            raise ItemFieldError(f"item {it.get('id', '?')}: field {f!r} is a JSON {json_kind(v)}, not a list of "
                                 "option texts", k)
        bad = next((j for j, o in enumerate(v) if not isinstance(o, (str, int, float)) or isinstance(o, bool)), None)
        if bad is not None:
            raise ItemFieldError(f"item {it.get('id', '?')}: field {f!r} entry {bad} is a JSON {json_kind(v[bad])}, "
                                 "not an option text", k)
    used = list(dict.fromkeys(f for f in where if f is not None))
    if not used:
        return None
    if len(used) > 1:
        first = {f: items[where.index(f)] for f in used}
        raise DataError("items differ in their options field (" + ", ".join(
            f"item {it.get('id', '?')}: {f!r}" for f, it in first.items()) + "); give every item the same one")
    if None in where:
        k = where.index(None)
        have = len(items) - where.count(None)
        raise ItemFieldError(f"item {items[k].get('id', '?')} has no options field {used[0]!r} while {have} of "
                             f"{len(items)} items have it; give every item its options, or none of them", k)
    return used[0]


def standardize_within(values: np.ndarray, groups: Sequence[str]) -> np.ndarray:
    """(v - mean_g) / sd_g inside each group g (population sd; a group with no spread gets zeros)."""
    values = np.asarray(values, dtype=float)
    groups_arr = np.asarray(groups)
    z = np.zeros_like(values)
    for g in np.unique(groups_arr):
        m = groups_arr == g
        sd = values[m].std()
        z[m] = (values[m] - values[m].mean()) / sd if sd > 0 else 0.0
    return z


@dataclass
class LabelledItems:
    """Items with a known difficulty, pooled over one or more benchmarks (one row per item)."""

    ids: list[str]
    texts: list[str]
    benchmark: list[str]  # the group inside which z is standardized and pairs are compared
    difficulty: np.ndarray  # fitted IRT b
    z: np.ndarray  # b standardized within its benchmark: the target
    category: list[str | None] = field(default_factory=list)  # e.g. mmlu-pro's subject
    items: list[dict[str, Any]] = field(default_factory=list)
    # per benchmark: mean and sd of b (z -> b), b_min and b_max (b -> the [0, 1] axis of the coverage tools)
    scales: dict[str, dict[str, float]] = field(default_factory=dict)
    fits: dict[str, Any] = field(default_factory=dict)  # benchmark -> IrtFit (abilities for the response AUC)
    matrices: dict[str, Any] = field(default_factory=dict)  # benchmark -> ResponseMatrix

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, idx: np.ndarray) -> LabelledItems:
        pick = [int(i) for i in idx]
        return LabelledItems(
            ids=[self.ids[i] for i in pick], texts=[self.texts[i] for i in pick],
            benchmark=[self.benchmark[i] for i in pick], difficulty=self.difficulty[pick], z=self.z[pick],
            category=[self.category[i] for i in pick] if self.category else [],
            items=[self.items[i] for i in pick] if self.items else [],
            scales=self.scales, fits=self.fits, matrices=self.matrices,
        )


def benchmark_targets(
    name: str,
    data_dir: str | Path | None = None,
    *,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> LabelledItems:
    """Fit the 1PL (MAP, the spec's guessing floor) on a registered benchmark and label its items.

    Only items that have both a text and responses are kept (aime25's matrix covers AIME I only).
    """
    from benchfill.benchmarks import get_benchmark
    from benchfill.data import read_responses
    from benchfill.irt import fit

    bench = get_benchmark(name, data_dir)
    spec = bench.spec
    if bench.responses_path is None:
        # items built in (the demo, its matrix simulated in memory) or from the Hub have no folder to name
        where = (f"no responses.csv next to {bench.items_path}" if bench.items_path
                 else "built in, without a responses.csv" if bench.matrix is not None
                 else f"items from Hugging Face dataset {spec.hf_dataset}, without a responses.csv")
        raise DataError(f"benchmark {name}: {where}; no difficulty to learn from")
    items = bench.items
    if progress:
        progress(f"{name}: fitting 1PL on {bench.responses_path}")
    matrix = read_responses(bench.responses_path, items=items)
    if spec.chance == "options":
        chance = matrix.chance
    else:
        chance = np.full(matrix.n_items, float(spec.chance))
    if not np.array_equal(chance, matrix.chance):
        from dataclasses import replace

        matrix = replace(matrix, chance=chance)
    irt = fit(matrix, engine="map", guessing=bool(np.any(chance > 0)), seed=seed)
    by_id = {str(it["id"]): it for it in items}
    kept = [by_id[i] for i in irt.item_ids]
    b = np.asarray(irt.difficulty, dtype=float)
    texts = [item_text(it, spec.text_field, spec.options_field) for it in kept]
    cats = [it.get("category") if isinstance(it.get("category"), str) else None for it in kept]
    scales = {name: {"mean": float(b.mean()), "sd": float(b.std()), "b_min": float(irt.b_min),
                     "b_max": float(irt.b_max)}}
    return LabelledItems(
        ids=list(irt.item_ids), texts=texts, benchmark=[name] * len(kept), difficulty=b,
        z=standardize_within(b, [name] * len(kept)), category=cats, items=kept, scales=scales,
        fits={name: irt}, matrices={name: matrix},
    )


def labelled_items(
    name: str,
    items: Sequence[dict[str, Any]],
    difficulty: Sequence[float],
    *,
    text_field: str | None = None,
    options_field: str | None = None,
    b_min: float | None = None,
    b_max: float | None = None,
) -> LabelledItems:
    """Label items whose difficulties come from elsewhere (a run's store, the simulated world's fit).

    ``b_min``/``b_max`` are the benchmark's normalization (IrtFit.b_min/b_max), so predictions land on the
    same [0, 1] axis as the coverage tools; they default to the range of ``difficulty``.
    """
    b = np.asarray(difficulty, dtype=float)
    if len(items) != len(b) or len(b) < 2:
        raise DataError(f"{name}: need one difficulty per item and at least two items ({len(items)} vs {len(b)})")
    ids = [str(it.get("id", k)) for k, it in enumerate(items)]
    scales = {name: {"mean": float(b.mean()), "sd": float(b.std()),
                     "b_min": float(b.min() if b_min is None else b_min),
                     "b_max": float(b.max() if b_max is None else b_max)}}
    return LabelledItems(
        ids=ids, texts=[item_text(it, text_field, options_field) for it in items], benchmark=[name] * len(b),
        difficulty=b, z=standardize_within(b, [name] * len(b)),
        category=[it.get("category") if isinstance(it.get("category"), str) else None for it in items],
        items=list(items), scales=scales,
    )


def pool(parts: Sequence[LabelledItems]) -> LabelledItems:
    """Several benchmarks' labelled items as one set (z stays standardized within each)."""
    if not parts:
        raise DataError("no benchmarks to pool")
    out = LabelledItems(ids=[], texts=[], benchmark=[], difficulty=np.zeros(0), z=np.zeros(0))
    for p in parts:
        out.ids += p.ids
        out.texts += p.texts
        out.benchmark += p.benchmark
        out.category += p.category or [None] * len(p)
        out.items += p.items or [{} for _ in range(len(p))]
        out.scales.update(p.scales)
        out.fits.update(p.fits)
        out.matrices.update(p.matrices)
    out.difficulty = np.concatenate([p.difficulty for p in parts])
    out.z = np.concatenate([p.z for p in parts])
    return out


def load_targets(names: Sequence[str], data_dir: str | Path | None = None, *, seed: int = 0,
                 progress: Callable[[str], None] | None = None) -> LabelledItems:
    """The registered benchmarks ``names`` (a list), each fitted and labelled, pooled as one set."""
    # A bare string is a sequence of its letters ("unknown benchmark 'h'"); refused rather than taken as one
    # name, so that a list is the one way to say it.
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise ConfigError(f"names: expected a list of benchmark names, got {type(names).__name__} {names!r}"
                          + (f" (write [{names!r}])" if isinstance(names, str) else ""))
    names = list(names)  # a generator is read once, here
    bad = next((n for n in names if not isinstance(n, str)), None)
    if bad is not None:
        raise ConfigError(f"names: expected benchmark names (strings), got {type(bad).__name__} {bad!r}")
    return pool([benchmark_targets(n, data_dir, seed=seed, progress=progress) for n in names])
