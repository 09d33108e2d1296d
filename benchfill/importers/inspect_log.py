"""inspect_ai eval logs (``.eval`` and ``.json``), read through inspect_ai's own log API.

inspect_ai is an optional extra (``pip install 'benchfill[inspect]'``); it is imported only here.
Each log is one task run by one model; each sample is scored once per epoch, so a sample's epochs
become its trials. The metric is a scorer's name (default: the log's first scorer). inspect's
letter values count as CORRECT ("C") = 1, INCORRECT ("I") and NOANSWER ("N") = 0; PARTIAL ("P")
and numbers other than 0 and 1 are not binary and need a threshold (on inspect's own
``value_to_float`` scale, on which "P" is 0.5). Item ids are ``<task>/<sample id>``.
"""

from __future__ import annotations

import json
import re
import reprlib
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchfill import untrusted
from benchfill.errors import ConfigError, DataError
from benchfill.importers.files import find_files
from benchfill.importers.matrix import ItemText, LogContent, Record, score

LETTERS = {"C": 1, "I": 0, "N": 0}


def find_logs(paths: list[str | Path]) -> list[Path]:
    """Logs named directly, and the logs found under the folders named (symlinked folders included), each
    file once (``files.find_files``).

    In a folder, every ``.eval`` file is a log (a zip no other tool writes), but a ``.json`` file is one
    only if it opens as inspect writes a log or is named like one (below): the folder also holds inspect's
    own ``eval-set.json`` and ``logs.json``, and this import's ``import.json`` when ``--out`` is inside it.
    """
    return find_files(paths, lambda q: q.suffix == ".eval" or (q.suffix == ".json" and _json_log(q)))


# inspect writes a JSON log as one object whose first key is "version", and names it
# <ISO time>_<task>_<id>.json (inspect's own log listing goes by that name); either marks a log, so a
# damaged log named by inspect is still read and reported, while other JSON files are left alone
JSON_LOG_START = re.compile(rb'^\s*\{\s*"version"\s*:')
JSON_LOG_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}[:-]\d{2}[:-]\d{2}")


# EvalSample fields the import never reads
UNUSED = {"messages", "events", "store", "attachments", "output"}


def _json_log(path: Path) -> bool:
    if JSON_LOG_NAME.match(path.name):
        return True
    try:
        with path.open("rb") as fh:
            head = fh.read(256).removeprefix(b"\xef\xbb\xbf")
    except OSError:
        return True  # read, and so reported, rather than silently left out
    return JSON_LOG_START.match(head) is not None


def _api():
    try:
        from inspect_ai.log import read_eval_log
        from inspect_ai.scorer import value_to_float
    except ImportError:
        raise ConfigError("importing inspect_ai logs needs inspect_ai: pip install 'benchfill[inspect]'") from None
    return read_eval_log, value_to_float()


def _read(read_eval_log: Callable[..., Any], path: Path, **kw: Any) -> Any:
    """``read_eval_log(path, **kw)`` with Ctrl-C and SIGTERM held until it returns, then raised again for
    the handlers they were meant for (a second one is not held). inspect_ai reads a log inside an event loop
    of its own: a signal that landed in it tore the loop down mid-read, and the errors of that teardown
    (anyio's RuntimeErrors, tracebacks of tasks never retrieved) read as a log that cannot be read. Off the
    main thread no signal lands here: read as it is. (On a thread of its own the read could not be stopped,
    and the interpreter, ending under it, aborted.)"""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return read_eval_log(str(path), **kw)
    held: list[int] = []
    before: dict[int, Any] = {}

    def give_back() -> None:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        before.clear()

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)
        if len(held) > 1:  # asked twice: now, whatever the read leaves behind (inspect's own tracebacks too)
            give_back()
            signal.raise_signal(signum)
        else:  # a large log takes seconds: say the key was heard
            print(f"benchfill: stopping once {untrusted.terminal(str(path))} is read; press Ctrl-C again to "
                  "stop now", file=sys.stderr, flush=True)

    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # (one ignored, as in a background job, stays so)
            before[sig] = signal.signal(sig, hold)
    try:
        log = read_eval_log(str(path), **kw)
    finally:
        give_back()
    if held:
        signal.raise_signal(held[0])  # the caller's handler: KeyboardInterrupt, the CLI's Terminated, or its own
    return log


def task_of(path: Path) -> str | None:
    read_eval_log, _ = _api()
    try:
        return _read(read_eval_log, path, header_only=True).eval.task
    except Exception:  # reported with its reason when the log is read in full
        return None


def read_log(path: Path, *, metric: str | None, threshold: float | None) -> tuple[LogContent, str]:
    read_eval_log, to_float = _api()
    try:
        # what a sample holds beyond its input, target and scores (the transcript, the model's output) is
        # most of a log and none of the matrix: left unread, a 2,000-sample .eval log with 20 KB answers peaks
        # at 176 MB instead of 513 MB (bench/bench_import.py; inspect applies it to .eval logs only)
        try:
            log = _read(read_eval_log, path, exclude_fields=UNUSED)
        except TypeError:  # inspect-ai before 0.3.241 reads a log whole (pyproject allows 0.3.100 and later)
            log = _read(read_eval_log, path)
    except Exception as exc:  # inspect raises zip, JSON and validation errors alike
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):  # its first line names no field ("2 validation errors for EvalLog")
            raise DataError(f"{path}: not a readable inspect_ai eval log: {_first_field(exc)}") from None
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
        raise DataError(f"{path}: not a readable inspect_ai eval log ({exc.__class__.__name__}"
                        f"{': ' + first if first else ''})") from None  # fmt: skip
    task, model = log.eval.task, log.eval.model
    if log.status != "success":
        # an errored, cancelled or still running eval holds only the samples it got to: mixed into the
        # matrix it would pass for a finished run, its missing samples looking like items left out
        raise DataError(f"{path}: the eval did not finish (status {log.status}); retry it (inspect eval-retry) "
                        f"and import the finished log, not this one")  # fmt: skip
    samples = log.samples or []
    if not samples:
        raise DataError(f"{path}: no samples in the log (status {log.status})")
    # samples marked invalid after the eval (inspect's invalidate_samples: a reward hack, a broken sandbox)
    # make the log one inspect itself counts unfinished: its eval sets retry it, its sample summaries refuse it
    invalid = [s for s in samples if getattr(s, "invalidation", None) is not None]
    if invalid or getattr(log, "invalidated", False):
        reason = next((r for s in invalid if (r := getattr(s.invalidation, "reason", None))), None)
        raise DataError(untrusted.terminal(
            f"{path}: {len(invalid) or 'some'} sample(s) invalidated" + (f" ({reason})" if reason else "")
            + "; inspect counts such a log unfinished: retry it (an eval set reruns it) and import the new log"))
    # a scorer that returns a dict is logged as one score per key (EvalScore name = key, scorer = the
    # scorer's name, under which each sample holds the dict): a key is chosen as SCORER/KEY or by its name
    keys = {(sc.name, getattr(sc, "scorer", sc.name)) for sc in (log.results.scores if log.results else [])}
    used = metric
    if used is None:
        first = log.results.scores[0] if log.results and log.results.scores else None
        if first is not None:
            scorer = getattr(first, "scorer", first.name)
            used = first.name if scorer == first.name else f"{scorer}/{first.name}"
        else:
            used = next((next(iter(s.scores)) for s in samples if s.scores), None)
    if used is None:
        raise DataError(f"{path}: no scored samples")
    scorer, key = used, None
    held = {k for s in samples if s.scores for k in s.scores}
    if used not in held:
        if "/" in used and used.split("/", 1)[0] in held:
            scorer, key = used.split("/", 1)
        else:
            of = [sc for name, sc in keys if name == used and sc != name]
            if len(of) == 1:
                scorer, key = of[0], used
                used = f"{scorer}/{key}"
    out = LogContent(source=str(path), model=model, task=task, settings=_settings(log.eval))
    per_item: dict[str, list[int]] = {}
    texts: set[str] = set()
    seen: set[tuple[str, int]] = set()
    for s in samples:
        where = f"{path} sample {s.id} epoch {s.epoch}"
        # one answer per sample and epoch: a repeat would count as a trial the eval never ran (the lm-eval
        # importer refuses a doc_id twice in one log, likewise)
        if (str(s.id), s.epoch) in seen:
            raise DataError(f"{where}: appears twice in one log (a log edited or merged by hand?)")
        seen.add((str(s.id), s.epoch))
        item_id = f"{task}/{s.id}"
        if item_id not in texts:
            texts.add(item_id)
            out.items.append(ItemText(item_id, task, _fields(s, task), str(path)))
        if s.error is not None or not s.scores:
            # a finished eval that tolerated errors (fail_on_error=False or a share) keeps the samples that
            # failed, unscored: the model never answered them, so they are no trial, right or wrong, and
            # are reported rather than left to look like items the run did not hold
            out.errored[item_id] = out.errored.get(item_id, 0) + 1
            continue
        if scorer not in s.scores:
            raise DataError(f"{where}: no scorer {scorer!r} (the log has {', '.join(map(repr, s.scores))})")
        value = s.scores[scorer].value
        if key is not None:
            if not isinstance(value, dict) or key not in value:
                has = f"keys {', '.join(map(repr, value))}" if isinstance(value, dict) else "one value, no keys"
                raise DataError(f"{where}: scorer {scorer!r} gives no value {key!r} ({has})")
            value = value[key]
        elif isinstance(value, dict):
            raise DataError(f"{where}: scorer {scorer!r} gives one value per key ({', '.join(map(repr, value))}); "
                            f"choose one with --metric {scorer}/KEY")  # fmt: skip
        per_item.setdefault(item_id, []).append(_binary(value, used, threshold, to_float, where, out))
    for item_id, hits in per_item.items():
        out.records.append(Record(model, task, item_id, sum(hits), len(hits), str(path)))
    if not out.records:
        raise DataError(f"{path}: no scored samples" + (f" (all {len(samples)} errored)" if out.errored else ""))
    epochs = log.eval.config.epochs if log.eval.config and log.eval.config.epochs else 1
    out.scoring = f"scorer {used}" + (f" >= {threshold}" if threshold is not None else "") + f"; {epochs} epoch(s) = trials"
    return out, used


def _settings(spec: Any) -> str:
    """What makes two logs of one model and task two setups rather than repeats (``--sum`` adds only
    repeats): the task's arguments (``-T cot=true``) and the model's (``-M``), as the log records them."""
    parts = []
    for name in ("task_args", "model_args"):
        args = getattr(spec, name, None)
        args = {k: v for k, v in args.items() if v is not None} if isinstance(args, dict) else args
        if args:
            parts.append(f"{name} " + json.dumps(args, sort_keys=True, ensure_ascii=False, default=str))
    return "; ".join(parts)


# pydantic's tag of a union's member at the end of an error's loc: a type (int, str, list[str]) or a model's
# class name, where inspect's field names are snake_case
UNION_MEMBER = re.compile(r"^(?:[A-Z]\w*|int|float|str|bool|bytes|none|[\w-]+\[.*\])$")


def _first_field(exc: Any) -> str:
    """A pydantic error as the first field at fault, what it should be and what it holds: ``field samples.0.id:
    Input should be a valid integer or a valid string, got None``. A union's failure is one error per member,
    each loc ending in the member's tag (``samples.0.id.int``, ``samples.0.id.str``): one field, said once."""
    errors = exc.errors()

    def tagged(loc: tuple) -> bool:
        return bool(loc) and isinstance(loc[-1], str) and UNION_MEMBER.match(loc[-1]) is not None

    members = Counter(tuple(e["loc"])[:-1] for e in errors if tagged(tuple(e["loc"])))

    def field(e: dict) -> tuple:
        loc = tuple(e["loc"])
        return loc[:-1] if tagged(loc) and members[loc[:-1]] > 1 else loc

    at = field(errors[0])
    same = [e for e in errors if field(e) == at]
    said = list(dict.fromkeys(e["msg"] for e in same))
    should = "Input should be "
    text = should + " or ".join(m.removeprefix(should) for m in said) if all(m.startswith(should) for m in said) \
        else "; ".join(said)
    got = "" if same[0].get("type") == "missing" else f", got {reprlib.repr(same[0].get('input'))}"
    rest = len({field(e) for e in errors}) - 1
    # a .eval log's samples are read one by one, each its own EvalSample: its loc starts there, not at the log
    model = "" if getattr(exc, "title", "EvalLog") == "EvalLog" else f" (in {exc.title})"
    name = ".".join(map(str, at)) or "(the log)"
    # the field's name is the log's own key (a score's name may hold a newline or an escape): one line, as is
    return untrusted.terminal(f"field {name}{model}: {text}{got}" + (f" (and {rest} more)" if rest else ""))


def _binary(value: Any, metric: str, threshold: float | None, to_float, where: str, log: LogContent) -> int:
    if isinstance(value, str):
        if threshold is not None:
            return score(to_float(value), metric, threshold, where, log)
        if value in LETTERS:
            return LETTERS[value]
        raise DataError(f"{where}: scorer {metric!r} gave {value!r}, not binary; "
                        f"pass --threshold T to count a score >= T as correct")  # fmt: skip
    if isinstance(value, (dict, list)):
        raise DataError(f"{where}: scorer {metric!r} gives several values per sample; benchfill needs one")
    return score(value, metric, threshold, where, log)


def _fields(sample: Any, task: str) -> dict[str, Any]:
    inp = sample.input
    if not isinstance(inp, str):
        inp = "\n".join(str(getattr(m, "text", m)) for m in inp)
    fields: dict[str, Any] = {"task": task, "text": inp, "target": sample.target}
    if sample.choices:
        fields["choices"] = list(sample.choices)
    return fields
