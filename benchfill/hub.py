"""Benchmarks from the Hugging Face Hub, read through ``datasets`` without touching the network.

``hf:ORG/NAME[:CONFIG][:SPLIT]`` names a dataset. It loads from, in this order:

1. a local dataset folder: the reference itself when it is a path (``hf:./my_copy``, ``hf:/data/quiz``,
   ``hf:~/quiz``; a missing folder is an error), else ``<data dir>/ORG/NAME``; a folder written by
   ``Dataset.save_to_disk`` or one of data files (JSONL, Parquet, CSV, with or without a dataset card)
   that ``datasets.load_dataset`` reads;
2. the ``datasets`` cache (``$HF_HOME/datasets``), where an earlier online
   ``datasets.load_dataset("ORG/NAME")`` left it.

benchfill never downloads: a dataset that is neither local nor cached is one error line that
says how to fetch it. ORG and NAME must be Hub repo id parts (no ``..``, nothing a path could climb
out of the data dir with). Rows become items through the benchmark spec's field mapping: the spec's
text and answer fields (and options/tests when set) must be columns; the item id is the spec's
``id_field``, else the first of ``id``, ``task_id``, ``question_id``, ``problem_id``, else
``NAME-<row>``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchfill.errors import DataError

PREFIX = "hf:"
ID_COLUMNS = ("id", "task_id", "question_id", "problem_id")


@dataclass(frozen=True)
class HubRef:
    repo: str
    config: str | None = None
    split: str | None = None

    def __str__(self) -> str:
        tail = (":" + (self.config or "")) if (self.config or self.split) else ""
        return PREFIX + self.repo + tail + (":" + self.split if self.split else "")

    def public(self) -> str:
        """The reference as it may be published: a local folder (``hf:/home/alice/private/quiz``, which the
        run id and a release's card carried whole) by its own name only; a Hub name as it is."""
        if _is_path(self.repo):
            return str(HubRef(Path(self.repo.rstrip("/")).name or "local", self.config, self.split))
        return str(self)

    def fetch_hint(self) -> str:
        args = repr(self.repo) + (f", {self.config!r}" if self.config else "")
        return (f"fetch it once online with: python -c \"import datasets; datasets.load_dataset({args})\" "
                f"(or save a copy with Dataset.save_to_disk to DIR/{self.repo} and pass --data-dir DIR)")  # fmt: skip


def is_hub(ref: Any) -> bool:
    return isinstance(ref, str) and ref.startswith(PREFIX)


def parse(ref: str) -> HubRef:
    """``hf:ORG/NAME[:CONFIG][:SPLIT]``; an empty CONFIG (``hf:ORG/NAME::test``) means the default."""
    if not is_hub(ref):
        raise DataError(f"{ref!r}: not a Hugging Face reference (hf:ORG/NAME[:CONFIG][:SPLIT])")
    parts = ref[len(PREFIX):].split(":")
    if not parts[0] or len(parts) > 3:
        raise DataError(f"{ref!r}: expected hf:ORG/NAME[:CONFIG][:SPLIT]")
    parts += [""] * (3 - len(parts))
    if not _is_path(parts[0]):
        _check_repo_id(parts[0], ref)
    return HubRef(parts[0], parts[1] or None, parts[2] or None)


# A Hub repo id's part as the Hub allows it (huggingface_hub's validate_repo_id, kept here since the hub
# extra is optional): letters, digits, '.', '_' and '-', beginning and ending with a letter, digit or '_'
REPO_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")


def _is_path(repo: str) -> bool:
    """A local folder's path (``hf:./my_copy``, ``hf:/data/quiz``, ``hf:~/quiz``), not a Hub name."""
    return Path(repo).is_absolute() or repo.startswith((".", "~"))


def _check_repo_id(repo: str, ref: str) -> None:
    """Refuse a Hub name that is no repo id: it is joined to --data-dir, and datasets looks it up as a path
    too, so ``hf:acme/../../etc`` read a folder outside the data dir (and ``hf:acme/..`` the data dir itself)."""
    parts = repo.split("/")
    bad = next((p for p in parts if not REPO_PART.fullmatch(p) or ".." in p or "--" in p), None)
    if len(parts) > 2 or bad is not None:
        why = (f"part {bad!r} is not a Hub name (letters, digits, '.', '_', '-'; no '..' or '--'; not starting or "
               "ending with '.' or '-')") if bad is not None else "more than one '/'"
        raise DataError(f"{ref!r}: {why}; expected hf:ORG/NAME[:CONFIG][:SPLIT], or hf:./FOLDER for a local folder")


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """datasets and huggingface_hub read their offline flags at call time from these constants."""
    import datasets
    import huggingface_hub.constants as hub_constants

    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    verbosity = datasets.logging.get_verbosity()
    bars_were_on = not datasets.are_progress_bars_disabled()
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    # Not "using the cached version since the Hub can't be reached", nor "Failed to load JSON ..." before
    # the one line benchfill says about it; and no "Generating test split" bars around a command's output.
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved
        datasets.logging.set_verbosity(verbosity)
        if bars_were_on:
            datasets.enable_progress_bars()


def _local_folder(ref: HubRef, data_dir: str | Path | None) -> Path | None:
    if _is_path(ref.repo):
        # a path names its folder only: joined to the data dir, "../x" had looked outside it, and the datasets
        # cache, told to fetch "./x" online, was no place to send the user
        own = Path(os.path.expanduser(ref.repo))
        if not own.is_dir():
            raise DataError(f"{ref}: no folder {own} (hf: and a path name a local dataset folder; a Hub dataset "
                            "is hf:ORG/NAME)")
        return own
    _check_repo_id(ref.repo, str(ref))  # (a HubRef made from a spec's hf_dataset is not parsed)
    if data_dir and (Path(data_dir) / ref.repo).is_dir():
        return Path(data_dir) / ref.repo
    return None


def load_rows(ref: HubRef, data_dir: str | Path | None = None, default_split: str = "test") -> tuple[list[dict], str]:
    """The rows of one split and where they came from (a folder, or the cache)."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"{ref}: reading Hugging Face datasets needs the datasets library, an optional extra: "
                        "pip install 'benchfill[hub]'") from None
    folder = _local_folder(ref, data_dir)
    if folder is None and Path(ref.repo).is_dir():  # (datasets takes a folder only: a file is no stand-in)
        # datasets takes a name that is also a path from here for that path: a folder acme/quiz in the current
        # directory stood in for the Hub's acme/quiz (a code benchmark's tests among its rows), said to come from
        # the cache. A Hub name means the data dir or the cache only.
        raise DataError(f"{ref}: {ref.repo} is also a folder in the current directory ({Path.cwd()}), which datasets "
                        f"would read in place of the Hub dataset; write hf:./{ref.repo} to mean it, or run from "
                        "another directory")
    try:
        with _offline():
            if folder is not None and ((folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()):
                ds = datasets.load_from_disk(str(folder))
            elif folder is not None:
                ds = datasets.load_dataset(str(folder), ref.config)
            else:
                ds = datasets.load_dataset(ref.repo, ref.config)
    except Exception as exc:  # datasets raises ConnectionError, FileNotFoundError, ValueError, ... alike
        if folder is not None:
            bad_line = _first_bad_line(folder)
            if bad_line:
                raise DataError(f"{ref}: {bad_line}") from None
            cause = _root_cause(exc)  # (DatasetGenerationError says only "an error occurred"; its cause says what)
            first = (str(cause).strip().splitlines() or [""])[0][:160]
            raise DataError(f"{ref}: cannot read the local dataset folder {folder} ({cause.__class__.__name__}: "
                            f"{first})") from None
        raise DataError(f"{ref}: not in the Hugging Face cache ({datasets.config.HF_DATASETS_CACHE}) and no local "
                        f"folder; {ref.fetch_hint()}") from None  # fmt: skip
    where = str(folder) if folder is not None else f"the datasets cache ({datasets.config.HF_DATASETS_CACHE})"
    if isinstance(ds, datasets.DatasetDict):
        split = ref.split or (default_split if default_split in ds else (next(iter(ds)) if len(ds) == 1 else None))
        if split not in ds:
            raise DataError(f"{ref}: no split {split or default_split!r} (the dataset has {', '.join(ds)}); "
                            f"name one: {PREFIX}{ref.repo}:{ref.config or ''}:SPLIT")  # fmt: skip
        ds = ds[split]
    return [dict(r) for r in ds], where


def _first_bad_line(folder: Path) -> str | None:
    """``FILE:LINE: what is wrong`` for the first line of the folder's JSON Lines files that is not a JSON
    object (the error `datasets` gives names neither), or None."""
    from benchfill.data import jsonl_objects

    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).parts
        if path.suffix.lower() not in (".jsonl", ".ndjson") or any(p.startswith(".") for p in rel) or not path.is_file():
            continue
        try:
            for _ in jsonl_objects(path):
                pass
        except DataError as exc:
            return str(exc)
    return None


def _root_cause(exc: BaseException) -> BaseException:
    seen = {id(exc)}
    while (nxt := exc.__cause__ or exc.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        exc = nxt
    return exc


def load_items(ref: str | HubRef, spec: Any = None, data_dir: str | Path | None = None) -> list[dict]:
    """Items with a string ``id`` and the fields of ``spec`` (a BenchmarkSpec, or None), from a Hugging Face dataset."""
    ref = parse(ref) if isinstance(ref, str) else ref
    default_split = getattr(spec, "hf_split", None) or "test"
    if spec is not None and ref.config is None and getattr(spec, "hf_config", None):
        ref = HubRef(ref.repo, spec.hf_config, ref.split)
    rows, where = load_rows(ref, data_dir, default_split)
    if not rows:
        raise DataError(f"{ref}: the split is empty ({where})")
    columns = list(rows[0])
    needed = []
    if spec is not None:
        needed = [f for f in (spec.text_field, spec.answer_field, spec.options_field, spec.tests_field,
                              spec.entry_point_field) if f]  # fmt: skip
    missing = [f for f in needed if f not in columns]
    if missing:
        raise DataError(f"{ref}: no column {missing[0]!r} for the spec of {spec.name} (columns: {', '.join(columns)}); "
                        f"set the spec's field names to the dataset's columns")  # fmt: skip
    id_field = getattr(spec, "id_field", None) or next((c for c in ID_COLUMNS if c in columns), None)
    if id_field is not None and id_field not in columns:
        raise DataError(f"{ref}: no id column {id_field!r} (columns: {', '.join(columns)})")
    name = ref.repo.rstrip("/").rsplit("/", 1)[-1]
    from benchfill.data import check_item_fields

    required = spec.required_fields() if spec is not None else []
    items, seen = [], {}
    for n, row in enumerate(rows, start=1):
        item_id = str(row[id_field]) if id_field else f"{name}-{n - 1}"
        if item_id in seen:
            raise DataError(f"{ref}: duplicate item id {item_id!r} in column {id_field!r} (row {n}; first in row "
                            f"{seen[item_id]})")
        seen[item_id] = n
        # a column a row lacks comes back as None (datasets fills it): as null as in a JSONL file
        check_item_fields(row, item_id, required, getattr(spec, "text_field", None), f"{ref} row {n}",
                          getattr(spec, "name", ""))
        items.append({**row, "id": item_id})
    return items
