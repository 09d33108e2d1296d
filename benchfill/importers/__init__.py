"""Results from the tools users already run: lm-eval-harness and inspect_ai logs -> a response matrix.

    from benchfill.importers import import_logs, write
    result = import_logs("inspect", ["logs/"], metric="match")
    write(result, "imported/")   # responses.csv, items.jsonl, import.json

``benchfill diagnose --responses imported/responses.csv --items imported/items.jsonl`` reads the result.
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path

from benchfill.errors import ConfigError, DataError
from benchfill.importers.matrix import ImportProblems, ImportResult, drop_repeated_texts, merge, write

TOOLS = ("lm-eval", "inspect")

__all__ = ["TOOLS", "ImportProblems", "ImportResult", "import_logs", "write"]


def import_logs(
    tool: str,
    paths: list[str | Path] | str | Path,
    *,
    metric: str | None = None,
    threshold: float | None = None,
    task: str | None = None,
    sum_repeats: bool = False,
) -> ImportResult:
    """Read every log (files, or directories searched for them; one path or a list) of ``tool`` into one matrix.

    Every log is read before any problem is raised, so :class:`ImportProblems` lists one line
    per bad log. ``metric`` picks the score that counts as correct (lm-eval: ``acc``, else
    ``exact_match``, else the first; inspect: the first scorer); a non-binary score needs
    ``threshold``. Two logs of one model and task are an error unless ``sum_repeats``.
    """
    if isinstance(paths, (str, os.PathLike)):  # one path: a str had been read as a list of one-letter paths
        paths = [paths]
    elif not isinstance(paths, (list, tuple)) or not all(isinstance(x, (str, os.PathLike)) for x in paths):
        raise ConfigError(f"paths: a path or a list of paths (files or folders), got {paths!r:.80}")
    # (the CLI's --threshold is a finite float already; from the library a NaN compared false with every score
    # and made every trial wrong without a word, and a string failed in the comparison as a TypeError)
    if threshold is not None:
        try:
            finite = not isinstance(threshold, bool) and isinstance(threshold, numbers.Real) and math.isfinite(threshold)
        except OverflowError:  # an int past a float's range (10**400)
            finite = False
        if not finite:
            raise ConfigError(f"threshold: expected a finite number, got {repr(threshold)[:40]}")
    if tool == "lm-eval":
        from benchfill.importers import lm_eval as reader
    elif tool == "inspect":
        from benchfill.importers import inspect_log as reader  # type: ignore[no-redef]
    else:
        raise ConfigError(f"unknown tool {tool!r}; use one of {', '.join(TOOLS)}")
    files = reader.find_logs(paths)
    if not files:
        raise DataError(f"no {tool} logs found in {', '.join(map(str, paths))}")
    # Tasks first (cheap: a file name, a log header), so --task filters before anything is scored.
    tasks = {f: reader.task_of(f) for f in files}
    # an lm-eval group (mmlu) logs no samples of its own: its subtasks' logs are imported together, as one
    # benchmark (item ids <subtask>/<doc_id> keep them apart), where no log holds the task by its own name
    group = None
    if task is not None and not any(t == task for t in tasks.values()) and hasattr(reader, "group_subtasks"):
        group = reader.group_subtasks(paths, task)
    if task is not None:
        wanted = set(group) if group else {task}
        files = [f for f in files if tasks[f] in wanted or tasks[f] is None]
        if not any(tasks[f] in wanted for f in files):
            raise ImportProblems([f"no log holds task {task!r}" + (f" nor any of its {len(group)} subtasks" if group
                                  else "") + f" (found: {', '.join(sorted(set(filter(None, tasks.values()))))})"])  # fmt: skip
    else:
        first: dict[str, Path] = {}
        for f in files:
            if tasks[f] is not None:
                first.setdefault(tasks[f], f)
        if len(first) > 1:
            (t1, f1), (t2, f2) = list(first.items())[:2]
            raise ImportProblems([f"the logs mix tasks: {t1} ({f1}) and {t2} ({f2}); import one at a time "
                                  f"(task=NAME; on the command line --task NAME)"])  # fmt: skip
    # the task chosen, or the one the logs agree on: a results file of another task loses nothing
    chosen = task if task is not None else next((t for t in tasks.values() if t is not None), None)
    lost = reader.unsampled(paths, files, group or chosen) if hasattr(reader, "unsampled") else []
    if lost:
        raise ImportProblems(lost)
    logs, problems, used = [], [], set()
    used_on: dict[str, set[str]] = {}  # task -> the metrics its logs scored by
    firsts: dict[tuple[str, str], bytes] = {}
    for f in files:
        try:
            content, m = reader.read_log(f, metric=metric, threshold=threshold)
        except ImportProblems as exc:
            problems += exc.problems
        except DataError as exc:
            problems.append(str(exc))
        else:
            drop_repeated_texts(content, firsts)
            logs.append(content)
            used.add(m)
            used_on.setdefault(content.task, set()).add(m)
    if problems:
        raise ImportProblems(problems)
    # (a group's subtasks may score by their own metrics, each its task's default: import.json's sources say
    # which log scored how; one task's logs by two defaults would be two metrics for one item)
    mixed = [(t, ms) for t, ms in used_on.items() if len(ms) > 1] if group else ([("", used)] if len(used) > 1 else [])
    if mixed:
        where = f" on {mixed[0][0]}" if group else ""
        raise ImportProblems([f"the logs{where} score with different default metrics ({', '.join(sorted(mixed[0][1]))}); "
                              f"choose one with --metric"])  # fmt: skip
    return merge(tool, logs, metric=", ".join(sorted(used)), threshold=threshold, task=task,
                 sum_repeats=sum_repeats, subtasks=group)
