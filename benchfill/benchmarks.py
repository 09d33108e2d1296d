"""Benchmark specs and the registry of named benchmarks.

A spec says which of an item's fields is the text, the reference answer, the options or the tests,
which evaluator grades a response and which solver prompt asks the question. Items come from a
local directory laid out like ``../shared/data`` (``<name>/items.jsonl`` and optionally
``<name>/responses.csv``); the Hugging Face dataset id is recorded for online use.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from benchfill.data import loads_json, read_mapping, read_text
from benchfill.errors import NOTE, ConfigError, DataError, validation_line
from benchfill.matrix import ResponseMatrix  # (light: numpy only) at run time, for get_type_hints

# The columns a benchfill release adds to every row of its data file (benchfill.release): provenance, not
# item fields. A release read back as a benchmark's items (to gap-fill it again) drops them on loading.
RELEASE_COLUMNS = (
    "origin", "ancestor_id", "gap_index", "gap_left", "gap_right", "target_z",
    "difficulty", "difficulty_se", "z", "z_se", "difficulty_source",
    "annotated_difficulty", "annotated_se", "annotated_z", "confirmed_difficulty", "confirmed_se", "confirmed_z",
    "probe_panel", "probe_results", "rewriter_model", "judge_model", "judge_reason", "flags", "reviews",
    "edited", "edited_by", "original_fields", "simulated", "true_difficulty",
    "run_id", "proposed_at", "released_in", "released_at",
)  # fmt: skip
# Every release since the first has written these; a row holding them all is a released row.
_RELEASE_MARKS = ("origin", "ancestor_id", "released_in")


def is_release_row(row: dict[str, Any]) -> bool:
    """Whether ``row`` is a row of a benchfill release's data file (original or generated)."""
    return all(k in row for k in _RELEASE_MARKS) and row.get("origin") in ("original", "generated")


def strip_release_columns(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with the release columns of released rows removed (in place), so that a released
    benchmark's rows are its items again: the rewriter does not read an earlier run's difficulties as
    fields, and a release of the new run does not meet its own column names among the item fields. An item
    field the release shipped as ``item_<name>`` (named like one of its columns) takes its name back."""
    for it in items:
        if is_release_row(it):
            for k in RELEASE_COLUMNS:
                it.pop(k, None)
            for k in RELEASE_COLUMNS:  # the item's own field of that name, which the release renamed
                if f"item_{k}" in it:
                    it[k] = it.pop(f"item_{k}")
    return items


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class BenchmarkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # names its run and release folders: letters, digits, '.', '_' and '-' (a release refused it otherwise,
    # after the run and its review)
    name: str = Field(min_length=1)
    text_field: str = "problem"
    answer_field: str = "answer"
    options_field: str | None = None
    tests_field: str | None = None
    entry_point_field: str | None = None
    evaluator: str = "math"  # a name in the evaluators registry
    solver_prompt: str = "math"  # a solver template under benchfill/prompts/
    # Guessing floor: a constant, or "options" for 1 / (number of options) of each item.
    chance: float | Literal["options"] = 0.0
    source: str = ""
    # The original items' licence as the Hub names it (mit, apache-2.0, cc-by-4.0, other) and how to cite them:
    # a release card carries both (its `license` field on the Hub); unsaid, the card says so
    license: str | None = Field(default=None, min_length=1, max_length=200)
    citation: str | None = Field(default=None, min_length=1)
    hf_dataset: str | None = None  # ORG/NAME, loaded from the local cache or folder (benchfill.hub)
    hf_config: str | None = None
    hf_split: str = "test"
    id_field: str | None = None  # the column holding item ids (default: id; an hf: dataset's: id, task_id, ...)

    @model_validator(mode="before")
    @classmethod
    def _multiple_choice_guesses(cls, data: Any) -> Any:
        # A multiple-choice spec that says nothing of a floor has one: 1 / each item's options, what the fit of
        # its responses file always took from the items (data.item_chance), while the search placed its new
        # items, and the fit of a run without responses its originals, at 0. One definition now, the spec's.
        if isinstance(data, dict) and data.get("evaluator") == "multiple_choice" and "chance" not in data:
            return {**data, "chance": "options"}
        return data

    @field_validator("name")
    @classmethod
    def _a_folder_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
            raise ValueError(f"{v!r} must be letters, digits, '.', '_' or '-', starting with a letter or digit (it "
                             "names the run's and the release's folders)")
        return v

    @field_validator("chance", mode="before")
    @classmethod
    def _a_floor_as_written(cls, v: Any) -> Any:
        # before pydantic's union: "0.25" was taken as 0.25, true as 1.0, and "option" named the union's
        # arms ("field chance.float: ... (and 1 more)")
        if isinstance(v, bool) or (isinstance(v, str) and v != "options") or not isinstance(v, int | float | str):
            hint = " (a number is written without quotes)" if isinstance(v, str) and _is_number(v) else ""
            raise ValueError(f"a guessing floor in [0, 1) or 'options', got {v!r}{hint}")
        return v

    @field_validator("chance")
    @classmethod
    def _a_floor(cls, v: float | str) -> float | str:
        if v != "options" and not 0.0 <= v < 1.0:  # a floor of 1 or more: every answer right by guessing
            raise ValueError(f"a guessing floor in [0, 1) or 'options', got {v!r}")
        return v

    @classmethod
    def from_file(cls, path: str | Path) -> BenchmarkSpec:
        """Read a spec from TOML, YAML or JSON; a bad field is named with the file."""
        path = Path(path)
        if not path.exists():  # (read_mapping would call it a config file)
            raise ConfigError(f"{path}: spec file not found")
        if path.is_dir():
            raise ConfigError(f"{path}: a folder, not a spec file")
        if path.suffix.lower() not in (".json", ".toml", ".yaml", ".yml"):
            raise ConfigError(f"{path}: unknown spec format {path.suffix!r} (use .toml, .yaml, .yml or .json)")
        if path.suffix.lower() == ".json":
            try:  # (read_text: a byte-order mark dropped, another encoding named in one line)
                data = loads_json(read_text(path))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{exc.lineno}: cannot parse spec: {exc.msg}") from exc
        else:
            data = read_mapping(path)
        data = data.get("benchmark", data) if isinstance(data, dict) else data
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(validation_line(str(path), exc)) from exc

    def required_fields(self) -> list[str]:
        """The fields every item needs: its text, its answer and what the grader reads (``ConfigError`` naming
        the evaluator where no grader of that name is registered)."""
        from benchfill.evaluators import spec_item_fields

        try:
            extra = spec_item_fields(self)
        except ConfigError as exc:
            raise ConfigError(f"benchmark {self.name}: {exc}") from None
        return list(dict.fromkeys([self.text_field, self.answer_field, *extra]))

    def check_runnable(self, where: str) -> None:
        """Refuse, before any work, a spec whose grader or solver prompt does not exist (``where``: its file)."""
        from benchfill.evaluators import spec_item_fields
        from benchfill.prompts import _BUILT_IN_SOLVERS, OWN_SOLVER_EXTRAS, _template_path, placeholders

        try:
            spec_item_fields(self)
        except ConfigError as exc:
            raise ConfigError(f"{where}: field {exc}") from None
        solver = self.solver_prompt or self.evaluator
        try:
            text, found = _template_path(f"solver_{solver}", None)
        except ConfigError as exc:
            raise ConfigError(f"{where}: field solver_prompt {solver!r}: {exc}") from None
        if solver not in _BUILT_IN_SOLVERS:
            # a solver of its own may name {options} or {entry_point} only where this spec's grader has them
            offered = {"problem", *([OWN_SOLVER_EXTRAS[self.evaluator]] if self.evaluator in OWN_SOLVER_EXTRAS else [])}
            unknown = placeholders(text, found) - offered
            if unknown:
                raise ConfigError(f"{where}: field solver_prompt {solver!r}: {found} names "
                                  f"{', '.join('{' + n + '}' for n in sorted(unknown))}, which a {self.evaluator} "
                                  f"benchmark's solver is not given (it is given {', '.join(sorted(offered))})")

    def chance_of(self, item: dict[str, Any]) -> float:
        if self.chance == "options":
            from benchfill.data import guessing_floor

            return guessing_floor(item, self.options_field)
        return float(self.chance)


_MATH = dict(text_field="problem", answer_field="answer", evaluator="math", solver_prompt="math")
REGISTRY: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        BenchmarkSpec(name="aime24", **_MATH, hf_dataset="HuggingFaceH4/aime_2024", hf_split="train",
                      source="AIME 2024 I and II, 30 integer-answer problems"),
        # (opencompass/AIME2025 splits I and II into two configs and names its text column "question")
        BenchmarkSpec(name="aime25", **_MATH, hf_dataset="math-ai/aime25",
                      source="AIME 2025 I and II, 30 integer-answer problems"),
        BenchmarkSpec(name="amc23", **_MATH, hf_dataset="math-ai/amc23",
                      source="AMC 2023, 40 numeric-answer problems"),
        BenchmarkSpec(name="humaneval", text_field="prompt", answer_field="canonical_solution",
                      tests_field="test", entry_point_field="entry_point", evaluator="code",
                      solver_prompt="code", hf_dataset="openai/openai_humaneval",
                      source="HumanEval, 164 Python functions checked by unit tests"),
        BenchmarkSpec(name="mmlu-pro", text_field="question", answer_field="answer", options_field="options",
                      evaluator="multiple_choice", solver_prompt="multiple_choice", chance="options",
                      hf_dataset="TIGER-Lab/MMLU-Pro",
                      source="MMLU-Pro, 12,032 multiple-choice questions with up to 10 options"),
    )
}


@dataclass
class Benchmark:
    """A spec with the place its items (and, when known, its responses) come from."""

    spec: BenchmarkSpec
    items_path: Path | None
    responses_path: Path | None = None
    _items: list[dict[str, Any]] | None = field(default=None, repr=False)
    matrix: ResponseMatrix | None = None  # when the benchmark ships one in memory (demo)
    _read_matrix: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._items is not None:
            strip_release_columns(self._items)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def items(self) -> list[dict[str, Any]]:
        if self._items is None:
            self._items = read_items_jsonl(self.items_path, self.spec)
        return self._items

    def given_matrix(self) -> ResponseMatrix | None:
        """The benchmark's own response matrix (a ResponseMatrix), or None: the one it ships in memory, or its
        responses file, read once (a run asked for it twice: 6 s at start-up on mmlu-pro)."""
        if self.matrix is not None:
            return self.matrix
        if self.responses_path is None:
            return None
        if self._read_matrix is None:
            from benchfill.data import read_responses, repeated_note

            matrix = read_responses(self.responses_path, items=self.items)
            note = repeated_note(matrix)
            if note:  # said once, as the file is read (the CLI's measuring commands say it the same way)
                logging.getLogger("benchfill.data").warning(note, extra=NOTE)
            # each item's floor as the spec defines it, the one the search places new items with (read_responses
            # takes 1 / the options of an "options" or "choices" field, whatever the spec says)
            floor = dict(zip((str(it["id"]) for it in self.items), self.chance, strict=True))
            self._read_matrix = dataclasses.replace(matrix, chance=np.array([floor.get(i, c) for i, c in
                                                                             zip(matrix.item_ids, matrix.chance,
                                                                                 strict=True)], dtype=float))
        return self._read_matrix

    @property
    def chance(self) -> np.ndarray:
        """Guessing floor of each item, in the order of ``items``."""
        return np.array([self.spec.chance_of(it) for it in self.items], dtype=float)


def known_benchmarks() -> list[str]:
    return sorted([*REGISTRY, "demo"])


def registered_spec(name: str) -> BenchmarkSpec:
    if name not in REGISTRY:
        raise ConfigError(f"unknown benchmark {name!r}; known: {', '.join(known_benchmarks())}")
    return REGISTRY[name]


def get_benchmark(name: str, data_dir: str | Path | None = None) -> Benchmark:
    """A registered benchmark with its items from ``data_dir`` (else ``$BENCHFILL_DATA_DIR``)."""
    if name == "demo":
        from benchfill.demo import demo_benchmark

        demo = demo_benchmark()
        spec = getattr(demo, "spec", None) or BenchmarkSpec(name="demo", **_MATH, source="built-in seeded demo")
        return Benchmark(spec=spec, items_path=None, _items=list(demo.items), matrix=demo.matrix)
    spec = registered_spec(name)
    root = data_dir or os.environ.get("BENCHFILL_DATA_DIR")
    folder = Path(root) / name if root else None
    items = folder / "items.jsonl" if folder else None
    if items is None or not items.is_file():
        # No local items file: the Hub dataset, from a local dataset folder or the datasets cache.
        hub = _from_hub(spec, root)
        if isinstance(hub, Benchmark):
            return hub
        if items is None:
            raise ConfigError(
                f"benchmark {name}: no local data; pass a data directory (--data-dir, or data_dir from Python) or "
                f"set BENCHFILL_DATA_DIR to a directory "
                f"holding {name}/items.jsonl, or load Hugging Face dataset {spec.hf_dataset}: {hub}"
            )
        raise DataError(f"benchmark {name}: {items} not found, nor Hugging Face dataset {spec.hf_dataset}: {hub}")
    responses = folder / "responses.csv"
    return Benchmark(spec=spec, items_path=items, responses_path=responses if responses.is_file() else None)


def _from_hub(spec: BenchmarkSpec, data_dir: str | Path | None) -> Benchmark | str:
    """The benchmark from its Hugging Face dataset, or why it could not be loaded (one line)."""
    if not spec.hf_dataset:
        return "the spec names no Hugging Face dataset"
    from benchfill.hub import HubRef, load_items

    try:
        rows = load_items(HubRef(spec.hf_dataset), spec, data_dir)
    except DataError as exc:
        return str(exc)
    return Benchmark(spec=spec, items_path=None, _items=rows)


def custom_benchmark(items: str | Path, spec_file: str | Path, responses: str | Path | None = None,
                     data_dir: str | Path | None = None) -> Benchmark:
    """Any other benchmark: an items file (or ``hf:ORG/NAME[:CONFIG][:SPLIT]``, whose local folder is looked
    for under ``data_dir``, else ``$BENCHFILL_DATA_DIR``), a spec file and optionally a response matrix."""
    spec = BenchmarkSpec.from_file(spec_file)
    spec.check_runnable(str(spec_file))
    if isinstance(items, str) and items.startswith("hf:"):
        from benchfill.hub import load_items

        resp = Path(responses) if responses else None
        if resp is not None and not resp.is_file():
            raise DataError(f"{resp}: responses file not found")
        return Benchmark(spec=spec, items_path=None, responses_path=resp,
                         _items=load_items(items, spec, data_dir or os.environ.get("BENCHFILL_DATA_DIR")))  # fmt: skip
    items_path = Path(items)
    if not items_path.is_file():
        raise DataError(f"{items_path}: {'a folder, not an items file' if items_path.is_dir() else 'items file not found'}")
    resp = Path(responses) if responses else None
    if resp is not None and not resp.is_file():
        raise DataError(f"{resp}: {'a folder, not a responses file' if resp.is_dir() else 'responses file not found'}")
    return Benchmark(spec=spec, items_path=items_path, responses_path=resp)


def read_items_jsonl(path: Path | None, spec: BenchmarkSpec) -> list[dict[str, Any]]:
    """Items as dicts (``benchfill.data.read_items``), each with the spec's text and answer fields."""
    from benchfill.data import read_items

    if path is None:
        raise DataError(f"benchmark {spec.name}: no items file")
    # a release's rows lose its columns before the check: a field it shipped as item_<name> is <name> again
    return read_items(path, required=spec.required_fields(), spec_name=spec.name, text_field=spec.text_field,
                      id_field=spec.id_field, clean=lambda row: strip_release_columns([row]))
