"""lm-eval-harness logs: the per-sample files of ``--log_samples`` and the results file beside them.

``lm_eval --output_path OUT --log_samples`` writes, per model, ``OUT/<model>/results_<time>.json``
(the model's name, each task's config) and one ``samples_<task>_<time>.jsonl`` per task: one JSON
object per document with ``doc_id``, ``doc``, ``target``, ``arguments`` (the prompt),
``filtered_resps`` and one key per metric. The file format is read as lm-eval writes it; lm-eval
itself (which pulls torch) is never imported.

Repeats: a task with ``repeats: R`` whose metric saw all R responses of a document (its filter
keeps them, e.g. ``take_first_k`` with k = R) logs the share of correct repeats; that share times R
becomes ``correct`` of R trials. With lm-eval's default filter (``take_first``) only the first
response is scored, so each document is one trial. A graded score whose values happen to fall on
the k/R grid would be read as such a share: give ``--threshold`` to treat the metric as graded
(then each document is one trial, correct when its score reaches the threshold). Item ids are
``<task>/<doc_id>``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from benchfill.errors import DataError
from benchfill.importers.matrix import ItemText, LogContent, Record, score

SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<time>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")
DEFAULT_METRICS = ("acc", "exact_match")  # the first one a sample carries is the default


def find_logs(paths: list[str | Path]) -> list[Path]:
    """Samples files named directly or found under the directories named."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(q for q in p.rglob("samples_*.jsonl") if SAMPLES.match(q.name))
        elif p.exists():
            found.append(p)
        else:
            raise DataError(f"{p}: not found")
    return found


def task_of(path: Path) -> str | None:
    m = SAMPLES.match(path.name)
    return m["task"] if m else None


def read_log(path: Path, *, metric: str | None, threshold: float | None) -> tuple[LogContent, str]:
    """One samples file and the model name from its results file; returns the content and the metric used."""
    m = SAMPLES.match(path.name)
    if not m:
        raise DataError(f"{path}: not an lm-eval-harness samples file (lm_eval --log_samples writes "
                        f"samples_<task>_<time>.jsonl)")  # fmt: skip
    task = m["task"]
    results_path = path.with_name(f"results_{m['time']}.json")
    try:
        results = json.loads(results_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: no {results_path.name} beside it (lm-eval writes the model's name there)") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{results_path}: not a readable lm-eval results file ({exc.__class__.__name__})") from None
    if not isinstance(results, dict):
        raise DataError(f"{results_path}: not an lm-eval results file (a JSON object was expected)")
    model = _model_name(results, results_path)
    configs = results.get("configs") or {}
    config = (configs.get(task) if isinstance(configs, dict) else None) or {}
    repeats = config.get("repeats") if isinstance(config, dict) else None
    if repeats is None:
        repeats = 1
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise DataError(f"{results_path}: configs.{task}.repeats must be a positive integer, found {repeats!r}")
    log = LogContent(source=str(path), model=model, task=task)
    used = metric
    try:
        used = _read_samples(path, task, model, repeats, threshold, log, used)
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a UTF-8 text file") from None
    if not log.records:
        raise DataError(f"{path}: no samples (an empty or truncated log)")
    scored = max(r.trials for r in log.records)
    log.scoring = (f"{used}: share of {scored} scored repeats x {scored}" if scored > 1
                   else f"{used}: one scored response per document" + (f" (of {repeats} repeats)" if repeats > 1 else ""))  # fmt: skip
    if threshold is not None:
        log.scoring = f"{used} >= {threshold}: one trial per document"
    return log, used or ""


def _read_samples(path: Path, task: str, model: str, repeats: int, threshold: float | None, log: LogContent,
                  used: str | None) -> str | None:
    """The samples file's records into ``log``; returns the metric ``used`` (found on the first sample when
    none was asked for)."""
    seen: set[int] = set()
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                sample = json.loads(line)
            except json.JSONDecodeError:
                raise DataError(f"{path} line {n}: not valid JSON (a truncated log?)") from None
            if not isinstance(sample, dict) or "doc_id" not in sample or "metrics" not in sample:
                raise DataError(f"{path} line {n}: not an lm-eval sample (no doc_id/metrics)")
            names = sample["metrics"]
            if not isinstance(names, list) or not names or not all(isinstance(x, str) for x in names):
                raise DataError(f"{path} line {n}: field 'metrics' must be a non-empty list of metric names")
            if used is None:
                used = next((x for x in DEFAULT_METRICS if x in names), None) or names[0]
            if used not in sample:
                raise DataError(f"{path} line {n}: no metric {used!r} (the log has {', '.join(names)})")
            doc_id = sample["doc_id"]
            if isinstance(doc_id, str) and doc_id.strip().isdigit():
                doc_id = int(doc_id)
            if isinstance(doc_id, bool) or not isinstance(doc_id, int):
                raise DataError(f"{path} line {n}: field 'doc_id' must be an integer, found {json.dumps(doc_id)}")
            if doc_id in seen:
                raise DataError(f"{path} line {n}: doc_id {doc_id} twice in one log")
            seen.add(doc_id)
            item_id = f"{task}/{doc_id}"
            where = f"{path} line {n}"
            correct, trials = _count(sample, used, repeats, threshold, where)
            log.records.append(Record(model, task, item_id, correct, trials, str(path)))
            log.items.append(ItemText(item_id, task, _item_fields(sample, task), str(path)))
    return used


def _count(sample: dict[str, Any], metric: str, repeats: int, threshold: float | None, where: str) -> tuple[int, int]:
    value = sample[metric]
    filtered = sample.get("filtered_resps") or []
    seen = len(filtered[0]) if repeats > 1 and filtered and isinstance(filtered[0], list) else 1
    if threshold is None and seen > 1 and isinstance(value, (int, float)) and not isinstance(value, bool):
        k = value * seen
        if abs(k - round(k)) < 1e-6 and 0 <= round(k) <= seen:
            return int(round(k)), seen
        raise DataError(f"{where}: metric {metric!r} ({value}) is not a share of the {seen} repeats; "
                        f"pass --threshold T to count a score >= T as correct")  # fmt: skip
    return score(value, metric, threshold, where), 1


def _item_fields(sample: dict[str, Any], task: str) -> dict[str, Any]:
    args = sample.get("arguments") or {}
    firsts = [a for _, a in sorted(args.items(), key=lambda kv: _arg_index(kv[0]))] if isinstance(args, dict) else []
    text = firsts[0].get("arg_0") if firsts and isinstance(firsts[0], dict) else None
    fields: dict[str, Any] = {"task": task, "text": text, "target": sample.get("target")}
    # multiple choice: one loglikelihood request per choice, the continuation is the choice
    conts = [a.get("arg_1") for a in firsts if isinstance(a, dict)]
    if len(conts) > 1 and all(isinstance(c, str) for c in conts):
        fields["choices"] = [c.strip() for c in conts]
    fields["doc"] = sample.get("doc")
    return fields


def _arg_index(key: str) -> int:
    """The N of an lm-eval request key "gen_args_N"; a key without one sorts last."""
    tail = key.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 1 << 30


def _model_name(results: dict[str, Any], path: Path) -> str:
    name = results.get("model_name")
    if name:
        return str(name)
    cfg = results.get("config") or {}
    if not cfg.get("model"):
        raise DataError(f"{path}: no model_name or config.model; not an lm-eval results file")
    args = cfg.get("model_args")
    return f"{cfg['model']}({args})" if args else str(cfg["model"])
