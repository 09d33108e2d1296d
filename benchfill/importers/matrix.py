"""Many evaluation logs in, one response matrix out: the part every importer shares.

An importer turns each log into :class:`Record` rows (one model, one task, one item, its correct
count and trials) and :class:`ItemText` rows (what the log says the item asks and expects). This
module scores a logged value as correct or not, merges the logs, refuses what cannot be merged
(an item id with two texts, the same model and task twice unless summing is asked for), and writes
``responses.csv``, ``items.jsonl`` and ``import.json`` so that nothing is half-written.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchfill import untrusted
from benchfill.errors import DataError
from benchfill.outputs import named, shared_mode


class ImportProblems(DataError):
    """One or more logs that cannot be imported; ``problems`` holds one line per log."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        super().__init__(problems[0] + more)


@dataclass
class Record:
    model: str
    task: str
    item_id: str
    correct: int
    trials: int
    source: str


@dataclass
class ItemText:
    item_id: str
    task: str
    fields: dict[str, Any]  # text, target and what else the log holds (choices)
    source: str


@dataclass
class LogContent:
    """What one log holds, once read."""

    source: str
    model: str
    task: str
    records: list[Record] = field(default_factory=list)
    items: list[ItemText] = field(default_factory=list)
    scoring: str = ""  # how the metric's values became correct/trials, for import.json
    errored: dict[str, int] = field(default_factory=dict)  # item id -> its samples (epochs) that errored
    # how the model was loaded (lm-eval's model_args) or the task run (inspect's task and model arguments):
    # one name may cover two checkpoints or setups, whose trials must not be added together
    settings: str = ""
    # the lowest and highest score compared with --threshold: merge refuses a threshold beyond all of them
    span: tuple[float, float] | None = None

    def met(self, value: float) -> None:
        self.span = (min(self.span[0], value), max(self.span[1], value)) if self.span else (value, value)


@dataclass
class ImportResult:
    tool: str
    metric: str
    threshold: float | None
    task: str
    models: list[str]
    item_ids: list[str]
    correct: dict[tuple[str, str], int]
    trials: dict[tuple[str, str], int]
    items: dict[str, dict[str, Any]]
    sources: list[dict[str, Any]]
    partial: dict[str, int] = field(default_factory=dict)  # model -> items it has, when fewer than all
    summed: list[str] = field(default_factory=list)
    errored: dict[str, list[str]] = field(default_factory=dict)  # model -> item ids with a sample that errored
    errored_samples: int = 0
    subtasks: list[str] = field(default_factory=list)  # a group's tasks imported as one (lm-eval's mmlu)

    def summary(self) -> dict[str, Any]:
        return {
            "tool": self.tool, "task": self.task, **({"subtasks": self.subtasks} if self.subtasks else {}),
            "metric": self.metric, "threshold": self.threshold,
            "models": len(self.models), "items": len(self.item_ids),
            "item_texts": len(self.items), "partial_models": self.partial, "summed": self.summed,
            "errored": self.errored, "sources": self.sources,
        }  # fmt: skip

    def lines(self) -> list[str]:
        thr = f", correct when score >= {self.threshold}" if self.threshold is not None else ""
        # model names and paths come from the logs: printed with their control characters escaped
        t = untrusted.terminal
        group = f" ({len(self.subtasks)} subtasks as one)" if self.subtasks else ""
        out = [f"{self.tool}: task {t(self.task)}{group}, {len(self.models)} model(s) x {len(self.item_ids)} item(s) "
               f"from {len(self.sources)} log(s); metric {t(self.metric)}{thr}"]
        out += [f"partial: {t(m)} has {n} of {len(self.item_ids)} items" for m, n in self.partial.items()]
        out += [f"summed: {t(s)}" for s in self.summed]
        return out

    def warnings(self, cap: int = 10) -> list[str]:
        """One line naming the samples that errored (the first ``cap`` ids; import.json lists all)."""
        if not self.errored:
            return []
        total = sum(map(len, self.errored.values()))
        parts, left = [], cap
        for m, ids in self.errored.items():
            if left > 0:
                parts.append(f"{untrusted.terminal(m)}: {', '.join(map(untrusted.terminal, ids[:left]))}")
                left -= len(ids[:left])
        more = f" and {total - cap} more" if total > cap else ""
        return [f"{self.errored_samples} sample(s) errored and count as no trial, right or wrong (import.json "
                f"'errored' lists them): {'; '.join(parts)}{more}"]  # fmt: skip


def score(value: Any, metric: str, threshold: float | None, where: str, log: LogContent | None = None) -> int:
    """1 or 0 for one logged value; a non-binary value needs an explicit threshold. A value compared with
    the threshold is noted in ``log``'s span."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        if threshold is not None:
            if log is not None:
                log.met(value)
            return int(value >= threshold)
        if value in (0, 1):
            return int(value)
        raise DataError(f"{where}: metric {metric!r} is not binary (value {value}); "
                        f"pass --threshold T to count a score >= T as correct")  # fmt: skip
    raise DataError(f"{where}: metric {metric!r} has a value benchfill cannot score ({value!r})")


def merge(tool: str, logs: list[LogContent], *, metric: str, threshold: float | None,
          task: str | None = None, sum_repeats: bool = False, subtasks: list[str] | None = None) -> ImportResult:  # fmt: skip
    """One matrix from many logs, or ImportProblems with one line per log at fault. ``subtasks``: where
    ``task`` is a group of them (lm-eval's mmlu), whose logs make one matrix under the group's name."""
    # the same file read twice (named twice, or through a symlink) is one run, not two to --sum
    once: dict[tuple[str, str, str], LogContent] = {}
    for log in logs:
        once.setdefault((os.path.realpath(log.source), log.model, log.task), log)
    logs = list(once.values())
    problems: list[str] = []
    tasks: dict[str, str] = {}
    for log in logs:
        tasks.setdefault(log.task, log.source)
    if task is not None:
        logs = [log for log in logs if log.task in (subtasks or (task,))]
    if len({log.task for log in logs}) > 1 and not subtasks:
        (t1, f1), (t2, f2) = list(tasks.items())[:2]
        raise ImportProblems([f"the logs mix tasks: {t1} ({f1}) and {t2} ({f2}); import one at a time "
                              f"(task=NAME; on the command line --task NAME)"])  # fmt: skip
    if not logs:
        raise ImportProblems([f"no log holds task {task!r}"])
    first_of: dict[tuple[str, str], str] = {}
    settings_of: dict[tuple[str, str], str] = {}
    summed = []
    for log in logs:
        key = (log.model, log.task)
        if key in first_of:
            if log.settings != settings_of[key]:
                if tool == "lm-eval":
                    problems.append(f"{log.source}: model {log.model} on task {log.task} again, loaded otherwise than "
                                    f"in {first_of[key]} ({log.settings or 'no weights named'} against "
                                    f"{settings_of[key] or 'no weights named'}): two models under one name; give one "
                                    "results file another model_name to import both")  # fmt: skip
                else:
                    problems.append(f"{log.source}: model {log.model} on task {log.task} again, run otherwise than "
                                    f"in {first_of[key]} ({log.settings or 'no arguments'} against "
                                    f"{settings_of[key] or 'no arguments'}): two setups whose trials are not "
                                    "repeats of one another; import them apart")  # fmt: skip
                continue
            if not sum_repeats:
                problems.append(f"{log.source}: model {log.model} on task {log.task} again (first in "
                                f"{first_of[key]}); pass --sum to add the two runs' trials")  # fmt: skip
                continue
            summed.append(f"{log.model} on {log.task}: {first_of[key]} + {log.source}")
        else:
            first_of[key], settings_of[key] = log.source, log.settings
    texts: dict[str, tuple[dict[str, Any], str]] = {}
    for log in logs:
        for it in log.items:
            seen = texts.get(it.item_id)
            if seen is None:
                texts[it.item_id] = (it.fields, it.source)
            elif _text_of(seen[0]) != _text_of(it.fields):
                problems.append(f"{it.source}: item {it.item_id} reads differently than in {seen[1]} "
                                f"({_what_differs(seen[0], it.fields)})")  # fmt: skip
                break
    if problems:
        raise ImportProblems(problems)
    correct: dict[tuple[str, str], int] = {}
    trials: dict[tuple[str, str], int] = {}
    # dicts as ordered sets (order of first appearance): a list's `in` made this quadratic in the items
    models: dict[str, None] = {}
    item_ids: dict[str, None] = {}
    for log in logs:
        for r in log.records:
            key = (r.model, r.item_id)
            models.setdefault(r.model)
            item_ids.setdefault(r.item_id)
            correct[key] = correct.get(key, 0) + r.correct
            trials[key] = trials.get(key, 0) + r.trials
    if not trials:
        raise ImportProblems([f"{logs[0].source if logs else 'the logs'}: no scored samples"])
    if threshold is not None:
        _check_threshold(logs, metric, threshold, sum(correct.values()), sum(trials.values()))
    errored: dict[str, dict[str, int]] = {}
    for log in logs:
        for i, n in log.errored.items():
            errored.setdefault(log.model, {})[i] = errored.get(log.model, {}).get(i, 0) + n
    per_model = {m: sum(1 for i in item_ids if (m, i) in trials) for m in models}
    partial = {m: n for m, n in per_model.items() if n < len(item_ids)}
    return ImportResult(
        tool=tool, metric=metric, threshold=threshold, task=task if subtasks else logs[0].task, models=list(models),
        item_ids=sorted(item_ids, key=_natural), correct=correct, trials=trials,
        items={i: {"id": i, "task": t[0].get("task"), **{k: v for k, v in t[0].items() if k not in ("task", "identity")}}
               for i, t in sorted(texts.items(), key=lambda kv: _natural(kv[0]))},
        sources=[{"file": log.source, "model": log.model, "task": log.task, "scoring": log.scoring} for log in logs],
        partial=partial, summed=summed,
        errored={m: sorted(ids, key=_natural) for m, ids in errored.items()},
        errored_samples=sum(n for ids in errored.values() for n in ids.values()),
        subtasks=sorted({log.task for log in logs}) if subtasks else [],
    )  # fmt: skip


def _check_threshold(logs: list[LogContent], metric: str, threshold: float, right: int, tried: int) -> None:
    """Refuse a threshold above every score (every trial wrong) or at or below every score (every trial
    right), where the scores differ: a matrix of one class has no difficulty to measure, and a threshold
    beyond all the scores is a slip of scale (5 on scores in [0, 1], 0.5 on a 0-100 metric), not a choice.
    A threshold inside the scores' range is taken, however few trials it puts on one side, and so is any
    threshold on scores that are all alike (every pass@10 1.0): there one class is the data's own."""
    spans = [log.span for log in logs if log.span is not None]
    if not spans or 0 < right < tried:  # (true/false values are not thresholded and have no span)
        return
    low, high = min(s[0] for s in spans), max(s[1] for s in spans)
    if low == high:
        return
    if right == 0 and threshold > high:
        said = f"above every score, so every one of the {tried} trials would count as wrong"
    elif right == tried and threshold <= low:
        said = f"at or below every score, so every one of the {tried} trials would count as correct"
    else:
        return
    raise ImportProblems([f"--threshold {threshold:g}: metric {metric!r} scores lie in [{low:g}, {high:g}]; the "
                          f"threshold is {said}; choose one inside that range"])  # fmt: skip


def drop_repeated_texts(log: LogContent, firsts: dict[tuple[str, str], bytes]) -> None:
    """Drop from ``log`` the item texts an earlier log holds alike (``firsts``: each (task, item id)'s
    first copy, as a digest of what :func:`merge` compares), as soon as the log is read: every model's log
    repeats the texts, and fifty models' copies of one suite held until the merge had the import's memory
    grow with the number of logs. A copy that reads otherwise is kept for the merge to report; what the
    merge keeps and reports is unchanged."""
    kept = []
    for it in log.items:
        digest = hashlib.sha256(_text_of(it.fields).encode("utf-8")).digest()
        first = firsts.setdefault((log.task, it.item_id), digest)
        if first is digest or first != digest:
            kept.append(it)
    log.items = kept


def _what_differs(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Which of what ``_text_of`` compares differs, named: the document, a prompt setting the task's config
    gives (lm-eval's ``num_fewshot``, run with another --num_fewshot, leaves text and target alike), the
    text, the target or the choices."""
    named = []
    if a.get("identity") is not None and b.get("identity") is not None:
        try:
            ia, ib = json.loads(a["identity"]), json.loads(b["identity"])
        except (TypeError, ValueError):
            ia = ib = None
        if isinstance(ia, dict) and isinstance(ib, dict):
            if ia.get("doc") != ib.get("doc"):
                named.append("the document differs")
            pa, pb = ia.get("prompt") or {}, ib.get("prompt") or {}
            if isinstance(pa, dict) and isinstance(pb, dict):
                def shown(v: Any) -> str:  # a doc_to_text template runs to a paragraph
                    text = json.dumps(v, ensure_ascii=False, default=str)
                    return text if len(text) <= 60 else text[:57] + "..."

                named += [f"task setting {k}: {shown(pa.get(k))} against {shown(pb.get(k))}"
                          for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
    elif a.get("text") != b.get("text"):
        named.append("the text differs")
    named += [f"the {k} differs" if k == "target" else "the choices differ" for k in ("target", "choices") if a.get(k) != b.get(k)]
    return "; ".join(named) or "text or target differ"


def _text_of(fields: dict[str, Any]) -> str:
    """What must agree between two logs' copies of one item: an importer's model-independent ``identity``
    where it gives one (lm-eval: the document and prompt settings, since a chat template renders each
    model's prompt its own way), else the text; and the target and choices."""
    what = "identity" if fields.get("identity") is not None else "text"
    return json.dumps({k: fields.get(k) for k in (what, "target", "choices")}, sort_keys=True)


def _natural(item_id: str) -> tuple:
    head, _, tail = item_id.rpartition("/")
    # ASCII digits only: str.isdigit() also holds for "²" or "①", which int() refuses; the tail breaks
    # ties ("7" and "07")
    return (head, 0, int(tail), tail) if tail.isascii() and tail.isdigit() else (head, 1, 0, tail)


def write(result: ImportResult, out: str | Path) -> list[Path]:
    """responses.csv, items.jsonl (when the logs carry item texts) and import.json in ``out``.

    Every file is written to a temporary name in ``out`` first and renamed only once all are
    written, so an error leaves no new file behind. Imports into one folder take turns (a lock on it),
    and each removes the temporary files that killed ones left.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: exists and is not a folder")
    names = ["responses.csv", *(["items.jsonl"] if result.items else []), "import.json"]
    for name in names:  # checked first: the renames at the end must all succeed, or the outputs mix two imports
        if (out / name).is_dir():
            raise DataError(f"--out {out}: {out / name} is a folder, where {name} is to be written")
    out.mkdir(parents=True, exist_ok=True)
    with _locked(out) as locked:  # one import at a time per folder, so that the sweep spares no live import
        _sweep_stale(out, locked)
        return _write_staged(result, out)


def _write_staged(result: ImportResult, out: Path) -> list[Path]:
    staged: list[tuple[Path, Path]] = []
    try:
        path = _stage(out, "responses.csv", staged)
        with path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["model", "item_id", "correct", "trials"])
            for m in result.models:
                for i in result.item_ids:
                    if (m, i) in result.trials:
                        w.writerow([m, i, result.correct[(m, i)], result.trials[(m, i)]])
        if result.items:
            path = _stage(out, "items.jsonl", staged)
            with path.open("w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(it, ensure_ascii=False) + "\n" for it in result.items.values())
        path = _stage(out, "import.json", staged)
        # import.json, renamed last, names the other files by their hash: a kill between the renames (which
        # no rename of several files can rule out) leaves a mix that this record shows
        files = {final.name: hashlib.sha256(tmp.read_bytes()).hexdigest() for tmp, final in staged[:-1]}
        path.write_text(json.dumps({**result.summary(), "files_sha256": files}, indent=1, default=_plain) + "\n",
                        encoding="utf-8")
    except BaseException as exc:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and staged:
            named(exc, staged[-1][1])  # the file being written when the disk filled
        raise
    for tmp, final in staged:
        os.replace(tmp, final)
    return [final for _, final in staged]


STALE_S = 60.0  # without a lock, a staged file this old was left by a killed import (an import takes seconds)
OUTPUTS = ("responses.csv", "items.jsonl", "import.json")


@contextmanager
def _locked(out: Path) -> Iterator[bool]:
    """An exclusive lock on the folder itself while an import writes into it (``locks.hold``; a concurrent
    import into it takes seconds: wait for it); False where the file system has no such lock."""
    from benchfill import locks

    fd = locks.hold(out)
    try:
        yield fd is not None
    finally:
        locks.release(fd)


def _sweep_stale(out: Path, locked: bool) -> None:
    """Remove the staged files (``.<name>.<random>.tmp``) of imports killed before their renames.

    Under the folder's lock every staged file is a dead import's (a live one holds the lock until its
    renames are done), so all go, however fresh: a quick rerun after a kill leaves none behind. Without
    the lock only those older than ``STALE_S`` can be told from a concurrent import's.
    """
    import time

    cutoff = time.time() - STALE_S
    for name in OUTPUTS:
        for p in out.glob(f".{name}.*.tmp"):
            if p.is_file() and (locked or p.stat().st_mtime < cutoff):
                p.unlink(missing_ok=True)


def _stage(out: Path, name: str, staged: list[tuple[Path, Path]]) -> Path:
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, shared_mode())
    staged.append((Path(tmp), out / name))
    return Path(tmp)


def _plain(x: Any) -> Any:
    return asdict(x) if hasattr(x, "__dataclass_fields__") else str(x)
